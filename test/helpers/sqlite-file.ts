// Opens a SQLite file a test inspects beside a live product: it waits out the product's locks (and a WAL recovery)
// instead of failing the test with "database is locked".
import { DatabaseSync, type DatabaseSyncOptions } from 'node:sqlite';

export const LOCK_WAIT_MS = 10_000;

export function openSqlite(path: string, options: DatabaseSyncOptions = {}): DatabaseSync {
  return new DatabaseSync(path, { timeout: LOCK_WAIT_MS, ...options });
}
