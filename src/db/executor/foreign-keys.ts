// SPEC 4.6: migrations that drizzle-kit and wrangler generate rebuild tables inside `PRAGMA foreign_keys=OFF` …
// `ON`. Inside a transaction SQLite ignores that pragma, and a request is always a transaction; so, as D1 does, it
// means "defer foreign-key checks": `defer_foreign_keys` is turned on, and at the request's end every foreign key
// is checked. A violation fails that request alone (its savepoint is rolled back), never the group's commit.
import { ApiError } from '../../shared/errors.ts';
import type { DbHandle } from './handles.ts';

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
