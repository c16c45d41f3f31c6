// Maps SQLite failures to SPEC 3 codes. Messages are SQLite's own (they name the table/column, never a value).
import { SQLITE_IOERR_SHMSIZE, type ErrorCode } from '../shared/errors.ts';

export interface ExecError {
  code: ErrorCode;
  message: string;
  details?: Record<string, unknown>;
}

const EXTENDED: Record<number, string> = {
  1: 'SQLITE_ERROR', 5: 'SQLITE_BUSY', 6: 'SQLITE_LOCKED', 7: 'SQLITE_NOMEM', 8: 'SQLITE_READONLY', 9: 'SQLITE_INTERRUPT',
  10: 'SQLITE_IOERR', 11: 'SQLITE_CORRUPT', 13: 'SQLITE_FULL', 14: 'SQLITE_CANTOPEN', 26: 'SQLITE_NOTADB', 18: 'SQLITE_TOOBIG', 19: 'SQLITE_CONSTRAINT',
  4874: 'SQLITE_IOERR_SHMSIZE', 20: 'SQLITE_MISMATCH', 21: 'SQLITE_MISUSE', 23: 'SQLITE_AUTH', 25: 'SQLITE_RANGE',
  275: 'SQLITE_CONSTRAINT_CHECK', 531: 'SQLITE_CONSTRAINT_COMMITHOOK', 787: 'SQLITE_CONSTRAINT_FOREIGNKEY',
  1043: 'SQLITE_CONSTRAINT_FUNCTION', 1299: 'SQLITE_CONSTRAINT_NOTNULL', 1555: 'SQLITE_CONSTRAINT_PRIMARYKEY',
  1811: 'SQLITE_CONSTRAINT_TRIGGER', 2067: 'SQLITE_CONSTRAINT_UNIQUE', 2323: 'SQLITE_CONSTRAINT_VTAB',
  2579: 'SQLITE_CONSTRAINT_ROWID', 3091: 'SQLITE_CONSTRAINT_DATATYPE',
};

export function sqliteCodeName(errcode: number): string {
  return EXTENDED[errcode] ?? EXTENDED[errcode & 0xff] ?? `SQLITE_${errcode}`;
}

/** An error SQLite raised (node:sqlite's), not one of ours nor a bad argument. */
export function isSqliteError(e: unknown): e is Error & { code: 'ERR_SQLITE_ERROR'; errcode: number } {
  const err = e as { code?: string; errcode?: number } | null;
  return err?.code === 'ERR_SQLITE_ERROR' && typeof err.errcode === 'number';
}

/** `denied` is what the sandbox's authorizer recorded for this statement, if it refused something. */
export function mapSqliteError(e: unknown, denied: ExecError | null): ExecError {
  const err = e as { code?: string; message?: string };
  const message = String(err.message ?? 'unknown error').slice(0, 500);
  if (!isSqliteError(e)) {
    // node:sqlite argument errors (bad bind, unknown named parameter) are the caller's; anything else is a bug of
    // ours, never to be passed off as the caller's SQL (nor its message shown: it may quote anything).
    if (typeof err.code === 'string' && err.code.startsWith('ERR_')) return { code: 'sql_error', message };
    return { code: 'internal', message: `internal error in the executor (${(e as Error | null)?.constructor?.name ?? typeof e})` };
  }
  const sqliteCode = sqliteCodeName(e.errcode);
  const details = { sqliteCode };
  // Opening a database on a full disk fails growing its shared-memory file: that is the disk, not damage.
  if (e.errcode === SQLITE_IOERR_SHMSIZE) return { code: 'quota_exceeded', message: 'the server\'s disk is full', details };
  switch (e.errcode & 0xff) {
    case 19: return { code: 'constraint_violation', message, details };
    case 23: return denied ?? { code: 'not_allowed', message: 'the sandbox refused this statement', details };
    case 13: return { code: 'quota_exceeded', message: 'the database is at its size limit (DB_MAX_SIZE_BYTES), or the server\'s disk is full, or an AUTOINCREMENT table\'s counter (sqlite_sequence) is at its largest value, 9223372036854775807', details };
    case 18: return { code: 'quota_exceeded', message: 'a string, blob or row is over the length limit (DB_MAX_VALUE_BYTES bounds each string or blob, and each row\'s values together)', details };
    // Nothing of the request stays (its transaction is rolled back): the caller may retry as it is.
    case 5: case 6: return { code: 'unavailable', message: `the database file stayed locked by another connection or process (${sqliteCode}): nothing of this request ran, retry after a second`, details: { ...details, committed: false } };
    case 7: return { code: 'unavailable', message: 'the database ran out of memory (SQLITE_NOMEM): nothing of this request ran, retry after a second', details: { ...details, committed: false } };
    case 11: case 26: return { code: 'internal', message: `the database file is damaged (${sqliteCode}: ${message}); the server's operator can bring it back from a backup (docs/backups.md)`, details };
    case 10: case 21: return { code: 'internal', message: `storage error (${sqliteCode})`, details };
    default:
      if (/cannot VACUUM/i.test(message)) return { code: 'not_allowed', message: 'VACUUM is not allowed', details };
      // Extensions are disabled in the connection itself, so SQLite refuses before the authorizer is asked.
      if (/load_extension/i.test(message)) return { code: 'not_allowed', message: 'load_extension is not allowed', details };
      if (/cannot create triggers on shadow tables/i.test(message)) return { code: 'not_allowed', message: 'triggers may not be made on a virtual table\'s shadow tables', details };
      if (/^table sqlite_\w+ may not be modified/i.test(message)) return { code: 'not_allowed', message: 'sqlite_schema may not be modified by SQL: it changes only through CREATE, ALTER and DROP', details };
      return { code: 'sql_error', message, details };
  }
}
