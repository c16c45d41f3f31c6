// Applies one change-log event's changeset to a copy of its database, exactly or not at all. Shared by the reference
// mirror's replicas and a cluster's follower (both import db; db imports neither).
import { constants, type DatabaseSync } from 'node:sqlite';
import type { ChangeEvent } from './contract.ts';
import { SCHEMA_FINGERPRINT_KEY, schemaFingerprint } from './schema-fingerprint.ts';

export function readVersion(db: DatabaseSync): number {
  const row = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number } | undefined;
  if (!row) throw new Error('not a scopebase database (no version)');
  return Number(row.value);
}

/**
 * Inside the caller's open transaction: the event's changeset applied, the version and schema checked. Returns null,
 * or why it cannot be applied (the caller rolls back and takes a snapshot instead).
 */
export function applyEvent(db: DatabaseSync, event: ChangeEvent): string | null {
  if (event.changeset === null) return 'the event carries no changeset';
  let problem: string | null = null;
  const tableExists = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?");
  for (const table of event.changes.tables) if (!tableExists.get(table)) return `table ${table} is missing (DDL in an execute)`;
  try {
    const applied = db.applyChangeset(Buffer.from(event.changeset, 'base64'), {
      // A table the copy lacks would be skipped silently by SQLite: treat it as a schema change.
      filter: (table) => {
        if (tableExists.get(table)) return true;
        problem ??= `table ${table} is missing`;
        return false;
      },
      onConflict: (kind) => {
        problem ??= `changeset conflict (kind ${kind})`;
        return constants.SQLITE_CHANGESET_ABORT;
      },
    });
    if (!applied) problem ??= 'changeset aborted';
  } catch (e) {
    return `applying failed: ${(e as Error).message.slice(0, 120)}`;
  }
  if (problem !== null) return problem;
  const version = readVersion(db);
  if (version !== event.version) return `version is ${version} after applying event ${event.version}`;
  // When the primary recorded its schema fingerprint (it changed the schema), ours must match.
  const row = db.prepare('SELECT value FROM _scopebase_meta WHERE key = ?').get(SCHEMA_FINGERPRINT_KEY) as { value: string } | undefined;
  if (row !== undefined && row.value !== schemaFingerprint(db)) return 'the schema changed on the primary (DDL in an execute)';
  return null;
}
