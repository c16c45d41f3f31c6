// The project's internal tables inside every database file (reserved prefix, refused to user SQL by the sandbox).
import type { DatabaseSync } from 'node:sqlite';

export const INTERNAL_SCHEMA = `
CREATE TABLE IF NOT EXISTS _scopebase_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
INSERT OR IGNORE INTO _scopebase_meta (key, value) VALUES ('version', 0);
CREATE TABLE IF NOT EXISTS _scopebase_migrations (seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, checksum TEXT NOT NULL, applied_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS _scopebase_changes (version INTEGER PRIMARY KEY, committed_at INTEGER NOT NULL, event TEXT NOT NULL);
`;

const INTERNAL_TABLES = ['_scopebase_meta', '_scopebase_migrations', '_scopebase_changes'];

/** Whether a database file holds every internal table (read from its schema, no table opened). */
export function hasInternalSchema(db: DatabaseSync): boolean {
  const row = db.prepare(`SELECT count(*) AS n FROM sqlite_schema WHERE type = 'table' AND name IN (${INTERNAL_TABLES.map(() => '?').join(', ')})`).get(...INTERNAL_TABLES) as { n: number };
  return Number(row.n) === INTERNAL_TABLES.length;
}

/** Change-log retention (SPEC 4.9): keep at least this many events and this much time, plus all unacknowledged. */
export const KEEP_EVENTS = 1000;
export const KEEP_MS = 7 * 24 * 3600 * 1000;
