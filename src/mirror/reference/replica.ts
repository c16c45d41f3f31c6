// One replica file: applies changesets exactly or reports why it cannot (then the caller re-bootstraps).
import { constants, DatabaseSync } from 'node:sqlite';
import type { ChangeEvent } from '../../db/contract.ts';
import { SCHEMA_FINGERPRINT_KEY, schemaFingerprint } from '../../db/schema-fingerprint.ts';

function openReplica(path: string): DatabaseSync {
  // No foreign-key actions and (see prepareSnapshot) no triggers: the changeset already holds every effect they had on the primary.
  const db = new DatabaseSync(path, { enableForeignKeyConstraints: false, timeout: 10_000 });
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL');
  return db;
}

function readVersion(db: DatabaseSync): number {
  const row = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number } | undefined;
  if (!row) throw new Error('not a scopebase database (no version)');
  return Number(row.value);
}

/** Makes a downloaded snapshot a replica: triggers dropped (they would fire twice), WAL on. Returns its version. */
export function prepareSnapshot(path: string): number {
  const db = openReplica(path);
  try {
    const triggers = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger'").all() as { name: string }[];
    for (const t of triggers) db.exec(`DROP TRIGGER "${t.name.replaceAll('"', '""')}"`);
    return readVersion(db);
  } finally {
    db.close();
  }
}

export class Replica {
  readonly path: string;
  readonly generation: number;
  private readonly db: DatabaseSync;
  version: number;

  constructor(path: string, generation: number) {
    this.path = path;
    this.generation = generation;
    this.db = openReplica(path);
    this.version = readVersion(this.db);
  }

  /** Applies the event's changeset in one transaction; returns null, or why the replica must be re-bootstrapped. */
  apply(event: ChangeEvent): string | null {
    const db = this.db;
    let problem: string | null = null;
    const tableExists = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?");
    for (const table of event.changes.tables) if (!tableExists.get(table)) return `table ${table} is missing (DDL in an execute)`;
    db.exec('BEGIN IMMEDIATE');
    try {
      const applied = db.applyChangeset(Buffer.from(event.changeset!, 'base64'), {
        // A table the replica lacks would be skipped silently by SQLite: treat it as a schema change.
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
      const version = problem === null ? readVersion(db) : -1;
      if (problem === null && version !== event.version) problem = `version is ${version} after applying event ${event.version}`;
      if (problem === null) problem = this.schemaProblem();
      if (problem !== null) {
        db.exec('ROLLBACK');
        return problem;
      }
      db.exec('COMMIT');
      this.version = version;
      return null;
    } catch (e) {
      if (db.isTransaction) db.exec('ROLLBACK');
      return `applying failed: ${(e as Error).message.slice(0, 120)}`;
    }
  }

  /** When the primary recorded its schema fingerprint (it changed the schema), ours must match. */
  private schemaProblem(): string | null {
    const row = this.db.prepare('SELECT value FROM _scopebase_meta WHERE key = ?').get(SCHEMA_FINGERPRINT_KEY) as { value: string } | undefined;
    if (row === undefined || row.value === schemaFingerprint(this.db)) return null;
    return 'the schema changed on the primary (DDL in an execute)';
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }
}
