// One replica file: applies changesets exactly or reports why it cannot (then the caller re-bootstraps).
import type { DatabaseSync } from 'node:sqlite';
import { openSqlite } from '../../shared/sqlite-open.ts';
import type { ChangeEvent } from '../../db/contract.ts';
import { applyEvent, readVersion } from '../../db/apply-event.ts';

/** A replica's connection, set up further by `then` (a throw there closes it). */
function openReplica<T>(path: string, then: (db: DatabaseSync) => T): T {
  // No foreign-key actions and (see prepareSnapshot) no triggers: the changeset already holds every effect they had on the primary.
  return openSqlite(path, { enableForeignKeyConstraints: false, timeout: 10_000 }, (db) => {
    db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL');
    return then(db);
  });
}

/** Makes a downloaded snapshot a replica: triggers dropped (they would fire twice), WAL on. Returns its version. */
export function prepareSnapshot(path: string): number {
  const db = openReplica(path, (d) => d);
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
    const opened = openReplica(path, (db) => ({ db, version: readVersion(db) }));
    this.db = opened.db;
    this.version = opened.version;
  }

  /** Applies the event's changeset in one transaction; returns null, or why the replica must be re-bootstrapped. */
  apply(event: ChangeEvent): string | null {
    const db = this.db;
    db.exec('BEGIN IMMEDIATE');
    try {
      const problem = applyEvent(db, event);
      if (problem !== null) {
        db.exec('ROLLBACK');
        return problem;
      }
      db.exec('COMMIT');
      this.version = event.version;
      return null;
    } catch (e) {
      if (db.isTransaction) db.exec('ROLLBACK');
      return `applying failed: ${(e as Error).message.slice(0, 120)}`;
    }
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }
}
