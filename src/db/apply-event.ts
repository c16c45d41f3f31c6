// Applies one change-log event's changeset to a copy of its database, exactly or not at all. Shared by the reference
// mirror's replicas and a cluster's follower (both import db; db imports neither). Both run their applies in an
// executor process (executor/copy-ops.ts): they evaluate the tenant's expressions, which only a kill can stop.
import { constants, type DatabaseSync } from 'node:sqlite';
import { openSqlite } from '../shared/sqlite-open.ts';
import type { ChangeEvent } from './contract.ts';
import { SCHEMA_FINGERPRINT_KEY, schemaFingerprint } from './schema-fingerprint.ts';

export function readVersion(db: DatabaseSync): number {
  const row = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number } | undefined;
  if (!row) throw new Error('not a scopebase database (no version)');
  return Number(row.value);
}

/**
 * A cluster follower's connection to its copy. FK actions off: the changeset already holds their effects;
 * synchronous=FULL: the ack means on disk. The schema is the tenant's: applying a changeset runs its CHECK
 * constraints, generated columns and index expressions, so they run as the executor runs them (trusted_schema=OFF,
 * no extensions, no ATTACH). Not defensive: changesets write full-text indexes' shadow tables.
 */
export function openCopy(path: string): DatabaseSync {
  return openSqlite(path, { enableForeignKeyConstraints: false, timeout: 10_000, allowExtension: false, limits: { attach: 0 } }, (db) => {
    db.exec('PRAGMA trusted_schema = OFF; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL');
    return db;
  });
}

/**
 * The reference mirror's connection to a replica (src/mirror/reference): FK actions off and (see prepareReplica) no
 * triggers, since the changeset already holds every effect they had on the primary; synchronous=NORMAL in WAL: a
 * committed apply survives the mirror's crash (a power cut may cost the last ones, which a snapshot heals). The
 * schema is the tenant's, so as openCopy: trusted_schema=OFF, no extensions, no ATTACH.
 */
export function openReplica(path: string): DatabaseSync {
  return openSqlite(path, { enableForeignKeyConstraints: false, timeout: 10_000, allowExtension: false, limits: { attach: 0 } }, (db) => {
    db.exec('PRAGMA trusted_schema = OFF; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL');
    return db;
  });
}

/**
 * The meta row where a replica keeps the id of the last event applied to it (written in the apply's transaction): its
 * change log stops at its snapshot, and the mirror compares this id with the source's event of the same version.
 */
const REPLICA_EVENT_KEY = 'replica_event';

/** A replica's version and the id of the event that made it: the last one applied, else its snapshot's (null at 0). */
export function replicaState(db: DatabaseSync): { version: number; lastEventId: string | null } {
  const version = readVersion(db);
  const applied = db.prepare('SELECT value FROM _scopebase_meta WHERE key = ?').get(REPLICA_EVENT_KEY) as { value: string } | undefined;
  if (applied !== undefined) return { version, lastEventId: applied.value };
  const logged = db.prepare("SELECT json_extract(event, '$.id') AS id FROM _scopebase_changes WHERE version = ?").get(version) as { id: string | null } | undefined;
  return { version, lastEventId: logged?.id ?? null };
}

/**
 * Makes a downloaded snapshot a replica: its triggers dropped (they would fire a second time), WAL on. Returns its
 * state. The connection is the caller's to close (before the file is renamed: closing checkpoints its WAL).
 */
export function prepareReplica(db: DatabaseSync): { version: number; lastEventId: string | null } {
  const triggers = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger'").all() as { name: string }[];
  if (triggers.length > 0) {
    db.exec('BEGIN IMMEDIATE');
    try {
      for (const t of triggers) db.exec(`DROP TRIGGER "${t.name.replaceAll('"', '""')}"`);
      db.exec('COMMIT');
    } catch (e) {
      if (db.isTransaction) db.exec('ROLLBACK');
      throw e;
    }
  }
  return replicaState(db);
}

/**
 * Applies one event to a reference mirror's replica in one transaction. Returns null once committed, or why not (the
 * mirror then re-bootstraps the replica from a snapshot). Throws when the connection failed (the caller closes it).
 */
export function applyToReplica(db: DatabaseSync, event: ChangeEvent): string | null {
  db.exec('BEGIN IMMEDIATE');
  try {
    const problem = applyEvent(db, event);
    if (problem === null) db.prepare('INSERT OR REPLACE INTO _scopebase_meta (key, value) VALUES (?, ?)').run(REPLICA_EVENT_KEY, event.id);
    db.exec(problem === null ? 'COMMIT' : 'ROLLBACK');
    return problem;
  } catch (e) {
    if (db.isTransaction) db.exec('ROLLBACK');
    throw e;
  }
}

/**
 * Applies consecutive events to a follower's copy in one transaction, each logged in the copy's own change log as
 * the primary logged it. Returns null once durable, or why not (the primary then sends a snapshot). Triggers would
 * fire a second time on the copy, so a database with triggers travels as snapshots. Throws when the connection
 * failed (the caller closes it).
 */
export function applyEvents(db: DatabaseSync, events: ChangeEvent[]): string | null {
  if (db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'trigger' LIMIT 1").get()) return 'the database has triggers';
  db.exec('BEGIN IMMEDIATE');
  try {
    const log = db.prepare('INSERT INTO _scopebase_changes (version, committed_at, event) VALUES (?, ?, ?)');
    for (const event of events) {
      const expected = readVersion(db) + 1;
      const problem = event.version !== expected ? `version ${event.version} is not the next one (${expected})` : applyEvent(db, event);
      if (problem !== null) {
        db.exec('ROLLBACK');
        return problem;
      }
      log.run(event.version, Date.parse(event.committedAt) || Date.now(), JSON.stringify(event));
    }
    db.exec('COMMIT');
    return null;
  } catch (e) {
    if (db.isTransaction) db.exec('ROLLBACK');
    throw e;
  }
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
