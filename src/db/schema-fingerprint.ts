// A digest of a database's user schema (tables, indexes, views; not triggers), so a follower can tell that the
// primary's schema changed in a way a changeset does not carry (DDL in /_db/execute).
import { createHash } from 'node:crypto';
import type { DatabaseSync } from 'node:sqlite';

/** The `_scopebase_meta` key under which the writer records the fingerprint when a request changed the schema. */
export const SCHEMA_FINGERPRINT_KEY = 'schema';

export function schemaFingerprint(db: DatabaseSync): string {
  const rows = db.prepare(`SELECT type, name, tbl_name, sql FROM sqlite_schema
    WHERE type IN ('table', 'index', 'view') AND name NOT LIKE '\\_scopebase\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
    ORDER BY type, name`).all();
  return createHash('sha256').update(JSON.stringify(rows.map((r) => [r.type, r.name, r.tbl_name, r.sql]))).digest('hex');
}
