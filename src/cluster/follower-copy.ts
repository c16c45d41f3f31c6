// The follower's side of one database: its copy is a file at the same place a primary keeps it (so promotion is only
// a placement change). Events are applied to it in an executor process (DbService.applyToCopy: they run the tenant's
// expressions, which must not run on this event loop); here, only what runs none: its state and a snapshot's install.
import { existsSync, mkdirSync, renameSync } from 'node:fs';
import { open as fsOpen } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { DatabaseSync } from 'node:sqlite';
import { openCopy as open, readVersion } from '../db/apply-event.ts';
import { removeCopy } from '../db/history/rebuild.ts';

export interface CopyState {
  /** 0 when there is no copy. */
  version: number;
  /** The id of the copy's newest change-log event: equal ids at equal versions mean one history. */
  lastEventId: string | null;
}

/** Copies opened for their state (a handshake, a promotion), kept between uses; at most MAX_OPEN, oldest closed first. */
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
 * Puts a received snapshot in place of the copy: fsynced, renamed over it, the directory fsynced. Returns its version.
 * Every executor process must have let go of the copy first (DbService.forget). Runs none of the tenant's
 * expressions: a version read, a checkpoint and file operations.
 */
export async function installSnapshot(path: string, received: string): Promise<number> {
  closeCopy(path);
  const db = open(received);
  let version: number;
  try {
    version = readVersion(db);
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
  } finally {
    db.close();
  }
  await fsyncPath(received); // off the event loop: a file of up to DB_MAX_SIZE_BYTES takes seconds to reach the disk
  removeCopy(path);
  mkdirSync(dirname(path), { recursive: true });
  renameSync(received, path);
  await fsyncPath(dirname(path));
  return version;
}

/** fsync(2) in libuv's thread pool: every other database this node serves goes on meanwhile. */
async function fsyncPath(path: string): Promise<void> {
  const handle = await fsOpen(path, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
