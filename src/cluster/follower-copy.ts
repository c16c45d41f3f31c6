// The follower's side of one database: its copy is a file at the same place a primary keeps it (so promotion is only
// a placement change), written here — never by the executors, which are told to forget it first.
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, renameSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DatabaseSync } from 'node:sqlite';
import { openSqlite } from '../shared/sqlite-open.ts';
import type { ChangeEvent } from '../db/contract.ts';
import { applyEvent, readVersion } from '../db/apply-event.ts';
import { removeCopy } from '../db/history/rebuild.ts';

export interface CopyState {
  /** 0 when there is no copy. */
  version: number;
  /** The id of the copy's newest change-log event: equal ids at equal versions mean one history. */
  lastEventId: string | null;
}

function open(path: string): DatabaseSync {
  // FK actions off: the changeset already holds their effects; synchronous=FULL: the ack means on disk. The schema is
  // the tenant's: applying a changeset runs its CHECK constraints, generated columns and index expressions, so they
  // run as the executor runs them (trusted_schema=OFF, no extensions, no ATTACH). Not defensive: changesets write
  // full-text indexes' shadow tables.
  return openSqlite(path, { enableForeignKeyConstraints: false, timeout: 10_000, allowExtension: false, limits: { attach: 0 } }, (db) => {
    db.exec('PRAGMA trusted_schema = OFF; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL');
    return db;
  });
}

/** Open copies, kept between applies (an open per apply cost more than the apply); at most MAX_OPEN, oldest closed first. */
const openCopies = new Map<string, DatabaseSync>();
const MAX_OPEN = 64;

function opened(path: string): DatabaseSync {
  let db = openCopies.get(path);
  if (db) {
    openCopies.delete(path);
  } else {
    db = open(path);
    if (openCopies.size >= MAX_OPEN) closeCopy(openCopies.keys().next().value!);
  }
  openCopies.set(path, db);
  return db;
}

/** Before anyone else writes the file (the node was promoted) or it is replaced (a snapshot). */
export function closeCopy(path: string): void {
  const db = openCopies.get(path);
  openCopies.delete(path);
  if (db?.isOpen) db.close();
}

export function copyState(path: string): CopyState {
  if (!existsSync(path)) return { version: 0, lastEventId: null };
  const db = opened(path);
  const version = readVersion(db);
  const row = db.prepare('SELECT event FROM _scopebase_changes WHERE version = ?').get(version) as { event: string } | undefined;
  return { version, lastEventId: row ? (JSON.parse(row.event) as { id: string }).id : null };
}

/**
 * Applies consecutive events in one transaction, each logged in the copy's own change log as the primary logged it.
 * Returns null once durable, or why not (the primary then sends a snapshot). Triggers would fire a second time on
 * the copy, so a database with triggers travels as snapshots.
 */
export function applyEvents(path: string, events: ChangeEvent[]): string | null {
  if (!existsSync(path)) return 'no copy yet';
  const db = opened(path);
  try {
    if (db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'trigger' LIMIT 1").get()) return 'the database has triggers';
    db.exec('BEGIN IMMEDIATE');
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
    closeCopy(path);
    return `applying failed: ${(e as Error).message.slice(0, 120)}`;
  }
}

/** Puts a received snapshot in place of the copy: fsynced, renamed over it, the directory fsynced. Returns its version. */
export function installSnapshot(path: string, received: string): number {
  closeCopy(path);
  const db = open(received);
  let version: number;
  try {
    version = readVersion(db);
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
  const fd = openSync(received, 'r');
  fsyncSync(fd);
  closeSync(fd);
  removeCopy(path);
  mkdirSync(dirname(path), { recursive: true });
  renameSync(received, path);
  const dir = openSync(dirname(path), 'r');
  fsyncSync(dir);
  closeSync(dir);
  return version;
}
