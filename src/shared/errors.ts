// The one error shape of SPEC 3. Every failure a caller sees is an ApiError.

export type ErrorCode =
  | 'invalid_request' | 'invalid_name' | 'sql_error' | 'read_only' | 'not_allowed'
  | 'unauthorized' | 'unauthenticated' | 'forbidden'
  | 'database_not_found' | 'not_found' | 'unknown_host'
  | 'constraint_violation' | 'migration_conflict' | 'gone'
  | 'payload_too_large' | 'result_too_large' | 'query_timeout'
  | 'rate_limited' | 'unavailable' | 'quota_exceeded' | 'internal';

const STATUS: Record<ErrorCode, number> = {
  invalid_request: 400, invalid_name: 400, sql_error: 400, read_only: 400, not_allowed: 400,
  unauthorized: 401, unauthenticated: 401, forbidden: 403,
  database_not_found: 404, not_found: 404, unknown_host: 404,
  constraint_violation: 409, migration_conflict: 409, gone: 410,
  payload_too_large: 413, result_too_large: 413, query_timeout: 422,
  rate_limited: 429, unavailable: 503, quota_exceeded: 507, internal: 500,
};

export interface ErrorBody {
  error: { code: ErrorCode; message: string; details?: Record<string, unknown> };
}

export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;
  /** Extra response headers, e.g. Retry-After or WWW-Authenticate. */
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, message: string, details?: Record<string, unknown>, headers?: Record<string, string>) {
    super(message);
    this.code = code;
    this.status = STATUS[code];
    this.details = details;
    this.headers = headers;
  }

  toBody(): ErrorBody {
    const error: ErrorBody['error'] = { code: this.code, message: this.message };
    if (this.details !== undefined) error.details = this.details;
    return { error };
  }
}

export function statusOf(code: ErrorCode): number {
  return STATUS[code];
}

/** SQLite's extended code when the shared-memory file cannot grow: on a full disk, opening a database fails so. */
export const SQLITE_IOERR_SHMSIZE = 4874;

/** A full disk, as node:sqlite (SQLITE_FULL, or SQLITE_IOERR_SHMSIZE opening a database) or the file system reports it. */
export function isDiskFull(err: unknown): boolean {
  const e = err as { code?: string; errcode?: number } | null;
  if (e?.code === 'ENOSPC') return true;
  return e?.code === 'ERR_SQLITE_ERROR' && typeof e.errcode === 'number' && ((e.errcode & 0xff) === 13 || e.errcode === SQLITE_IOERR_SHMSIZE);
}
