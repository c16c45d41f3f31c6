// A database put back from a whole-instance backup (SPEC 9.2, `scopebase restore`) goes on from the backup's version,
// so the versions lost with the disk are numbered again with other content. The restore therefore commits one more
// version into each restored copy, logged as a SPEC 4.11 `database.restored` event: every mirror receives it first
// (delivery is in version order), and a mirror at or past its version knows the versions restarted and takes a
// snapshot (src/mirror/DESIGN.md, "Whole-instance restore"). Run on a copy no server has open.
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { DatabaseSync } from 'node:sqlite';
import type { Scope } from './contract.ts';
import { INTERNAL_SCHEMA } from './executor/schema.ts';
import { userTables } from './executor/install.ts';
import { eventId } from './executor/write-ops.ts';

/** The version the backup held and the one the restore committed (its event's id: `eventId`). */
export interface RestoredMark { restoredVersion: number; version: number; eventId: string }

export function commitBackupRestore(path: string, scope: Scope, at = Date.now()): RestoredMark {
  const db = new DatabaseSync(path, { enableForeignKeyConstraints: false });
  try {
    // The restore syncs each file itself before the restored folder is put in place.
    db.exec('PRAGMA synchronous = OFF');
    db.exec('BEGIN IMMEDIATE');
    try {
      db.exec(INTERNAL_SCHEMA); // a file the server never wrote has none yet (it makes them as it creates a database)
      const restoredVersion = Number((db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number | bigint }).value);
      const version = restoredVersion + 1;
      const tables = userTables(db, 'main').sort(); // every table: the whole content is new to a mirror
      // The same event, field for field, as a time-travel restore's (executor/write-ops.ts recordChange).
      const event = {
        id: eventId(), type: 'database.restored', org: scope.org, repo: scope.repo, database: scope.database,
        version, previousVersion: restoredVersion, operation: 'restore', committedAt: new Date(at).toISOString(),
        changes: { rowsAffected: 0, tables }, changeset: null, restoredVersion,
      };
      db.prepare("UPDATE _scopebase_meta SET value = ? WHERE key = 'version'").run(version);
      db.prepare('INSERT INTO _scopebase_changes (version, committed_at, event) VALUES (?, ?, ?)').run(version, at, JSON.stringify(event));
      db.exec('COMMIT');
      return { restoredVersion, version, eventId: event.id };
    } catch (e) {
      if (db.isTransaction) db.exec('ROLLBACK');
      throw e;
    }
  } finally {
    db.close();
  }
}

/**
 * Beside a restored database file, until a cluster follower holds its restore event (src/cluster/shipper.ts): the
 * versions the backup lost may still be on a follower, whose copy this one must not replace. Not part of a backup.
 */
export function restoredMarkPath(path: string): string {
  return `${path}.restored`;
}

export function writeRestoredMark(path: string, mark: RestoredMark): void {
  writeFileSync(restoredMarkPath(path), JSON.stringify({ version: mark.version, eventId: mark.eventId }), { mode: 0o600 });
}

/** The restore event's version and id, or null: none (or not readable: then nothing is held back). */
export function readRestoredMark(path: string): { version: number; eventId: string } | null {
  const file = restoredMarkPath(path);
  if (!existsSync(file)) return null;
  try {
    const mark = JSON.parse(readFileSync(file, 'utf8')) as { version?: unknown; eventId?: unknown };
    return Number.isSafeInteger(mark.version) && typeof mark.eventId === 'string' ? { version: mark.version as number, eventId: mark.eventId } : null;
  } catch {
    return null;
  }
}

export function clearRestoredMark(path: string): void {
  rmSync(restoredMarkPath(path), { force: true });
}
