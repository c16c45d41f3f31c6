// SPEC 4.6: migrations that drizzle-kit, wrangler and @libsql/client's migrate() generate rebuild tables between
// `PRAGMA foreign_keys=OFF` and `=ON`. SQLite honours that pragma only outside a transaction, and a request is
// always one; so a request that turns foreign keys off runs alone, with them off on its connection from before its
// BEGIN (a rebuild's DROP TABLE then fires no ON DELETE CASCADE or SET NULL on other tables' rows, which deferring
// alone would), and every foreign key is checked before COMMIT. `defer_foreign_keys = ON` defers the checks only.
// A violation fails that request alone (its savepoint is rolled back), never the group's commit.
import { ApiError } from '../../shared/errors.ts';
import type { DbHandle } from './handles.ts';
import { statementStarts } from '../statement-end.ts';

/** `PRAGMA foreign_keys = OFF`, read where a statement starts (sticky); each run of spaces atomic, `(?=(\s*))\N`: read once, never backtracked. */
const TURNS_OFF = /PRAGMA(?=(\s+))\1(?:"?main"?(?=(\s*))\2\.(?=(\s*))\3)?"?foreign_keys"?(?=(\s*))\4=(?=(\s*))\5['"]?(?:off|0|false|no)\b/iy;

/**
 * `PRAGMA foreign_keys = OFF` at the start of any statement of `sql` (after comments). Each statement start is found
 * once: one pattern tried after every `;` re-read the comments after it to the text's end, and `;/*` repeated (90 KB,
 * in a libSQL batch) held the main process's event loop a second, quadratic in the length (docs/security.md).
 */
export function turnsForeignKeysOff(sql: unknown): boolean {
  if (typeof sql !== 'string' || !/foreign_keys/i.test(sql)) return false;
  for (const start of statementStarts(sql)) {
    TURNS_OFF.lastIndex = start;
    if (TURNS_OFF.test(sql)) return true;
  }
  return false;
}

/** Runs `fn` with foreign keys off on `h`'s connection when `off` (set outside any transaction, where SQLite honours it). */
export function withForeignKeysOff<T>(h: DbHandle, off: boolean, fn: () => T): T {
  if (!off) return fn();
  h.internal('PRAGMA foreign_keys = OFF').run();
  try {
    return fn();
  } finally {
    h.internal('PRAGMA foreign_keys = ON').run();
  }
}

/** Defers foreign-key checks on `h` until endDeferral (a statement asked, or a migration runs). */
export function deferForeignKeys(h: DbHandle): void {
  if (h.deferringForeignKeys) return;
  h.internal('PRAGMA defer_foreign_keys = ON').run();
  h.deferringForeignKeys = true;
}

/** Ends a deferral: `check` (the request succeeded so far) checks every foreign key first, and throws a constraint_violation. */
export function endDeferral(h: DbHandle, check: boolean): void {
  if (!h.deferringForeignKeys) return;
  h.deferringForeignKeys = false;
  try {
    if (!check) return;
    const bad = firstOrphan(h);
    if (bad) throw orphanError(bad);
  } finally {
    h.internal('PRAGMA defer_foreign_keys = OFF').run();
  }
}

const MISMATCH = /foreign key mismatch/i;

/**
 * The first row (of `table`, or of any table) whose foreign key names a missing row, or null. A key SQLite can never
 * check — its parent columns have no unique index ("foreign key mismatch") — is skipped, as SQLite itself skips it
 * until a row is written to its table: the schema is the repo's to keep, and its export must import again.
 */
export function firstOrphan(h: DbHandle, table?: string): { table: string; parent: string } | null {
  try {
    const row = table === undefined
      ? h.internal('SELECT "table", parent FROM pragma_foreign_key_check LIMIT 1').get()
      : h.internal('SELECT "table", parent FROM pragma_foreign_key_check(?) LIMIT 1').get(table);
    return (row as { table: string; parent: string } | undefined) ?? null;
  } catch (e) {
    if (!MISMATCH.test(String((e as Error).message))) throw e;
    if (table !== undefined) return null;
    for (const t of h.internal("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'").all() as { name: string }[]) {
      const found = firstOrphan(h, t.name);
      if (found) return found;
    }
    return null;
  }
}

export function orphanError(bad: { table: string; parent: string }): ApiError {
  return new ApiError('constraint_violation', `FOREIGN KEY constraint failed: a row of ${bad.table} refers to a missing row of ${bad.parent}`, { sqliteCode: 'SQLITE_CONSTRAINT_FOREIGNKEY' });
}
