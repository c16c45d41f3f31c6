// SPEC 4.6: migrations that drizzle-kit, wrangler and @libsql/client's migrate() generate rebuild tables between
// `PRAGMA foreign_keys=OFF` and `=ON`. SQLite honours that pragma only outside a transaction, and a request is
// always one; so a request that turns foreign keys off runs alone, with them off on its connection from before its
// BEGIN (a rebuild's DROP TABLE then fires no ON DELETE CASCADE or SET NULL on other tables' rows, which deferring
// alone would), and every foreign key is checked before COMMIT. `defer_foreign_keys = ON` defers the checks only.
// A violation fails that request alone (its savepoint is rolled back), never the group's commit.
import { ApiError } from '../../shared/errors.ts';
import type { DbHandle } from './handles.ts';

/** `PRAGMA foreign_keys = OFF` at the start of any statement of `sql` (after comments). */
const TURNS_OFF = /(?:^|;)\s*(?:--[^\n]*(?:\n\s*|$)|\/\*[\s\S]*?\*\/\s*)*PRAGMA\s+(?:"?main"?\s*\.\s*)?"?foreign_keys"?\s*=\s*['"]?(?:off|0|false|no)\b/i;

export const turnsForeignKeysOff = (sql: unknown): boolean => typeof sql === 'string' && TURNS_OFF.test(sql);

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
    const bad = h.internal('SELECT "table" AS t, parent AS p FROM pragma_foreign_key_check LIMIT 1').get() as { t: string; p: string } | undefined;
    if (bad) throw new ApiError('constraint_violation', `FOREIGN KEY constraint failed: a row of ${bad.t} refers to a missing row of ${bad.p}`, { sqliteCode: 'SQLITE_CONSTRAINT_FOREIGNKEY' });
  } finally {
    h.internal('PRAGMA defer_foreign_keys = OFF').run();
  }
}
