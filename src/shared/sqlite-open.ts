// Opening a SQLite file whose setup can fail: a full disk, a damaged file, a file that is not a database.
import { DatabaseSync, type DatabaseSyncOptions } from 'node:sqlite';

/**
 * Opens `path` and hands the connection to `setup`, whose result is returned (the caller owns the connection from
 * then on). When `setup` throws, the connection is closed first: left to the garbage collector it would keep its
 * file descriptors and its locks, the shared-memory one among them, and while the disk is full no other process
 * could open that database (docs/reliability.md, "Faults").
 */
export function openSqlite<T>(path: string | URL, options: DatabaseSyncOptions, setup: (db: DatabaseSync) => T): T {
  const db = new DatabaseSync(path, options);
  try {
    return setup(db);
  } catch (e) {
    if (db.isOpen) db.close();
    throw e;
  }
}
