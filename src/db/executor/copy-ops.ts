// A cluster follower's and a reference mirror's ops on their copies, run in an executor process: a changeset's apply
// evaluates the tenant's CHECK constraints, generated columns and index expressions, even a version read parses the
// tenant's schema (its size the tenant's to pick), and a running SQLite step is stopped only by killing its process.
// The pool runs the ops under a time limit like any statement (ExecutorPool.applyToCopy, copyState, checkSnapshot,
// applyToReplica, openReplica); the connections here are their own (openCopy's or openReplica's settings), not the
// sandboxed handles of a primary's requests.
import { statSync } from 'node:fs';
import type { DatabaseSync } from 'node:sqlite';
import { applyEvents, applyToReplica, openCopy, openReplica, prepareReplica, readVersion, replicaState } from '../apply-event.ts';
import type { ChangeEvent } from '../contract.ts';

/** What the op answers: the copy's new version, or why it was not applied (the primary then ships a snapshot). */
export type ApplyOutcome = { version: number } | { problem: string };

/** A follower's copy as the primary's handshake asks it (version 0 when there is none), or a mirror's replica. */
export type StateOutcome = { version: number; lastEventId: string | null } | { problem: string };

interface Open { db: DatabaseSync; ino: number; usedAt: number }

/** Few: a process applies to the copies its node follows, each one's applies spread over the processes. */
const MAX_OPEN = 16;

/**
 * Open copies of one process, kept between applies (an open per apply cost more than the apply), closed when the
 * node says so (`forget`, before a snapshot replaces the copy), when idle, or the least recently used past MAX_OPEN.
 */
export class CopyCache {
  private readonly open = new Map<string, Open>();
  /** How a file is opened: a follower's copy (openCopy) or a mirror's replica (openReplica). */
  private readonly opener: (path: string) => DatabaseSync;

  constructor(opener: (path: string) => DatabaseSync = openCopy) {
    this.opener = opener;
  }

  private get(path: string): DatabaseSync {
    const ino = statSync(path).ino; // throws ENOENT: no copy
    const held = this.open.get(path);
    if (held) {
      this.open.delete(path);
      if (held.ino === ino && held.db.isOpen) {
        held.usedAt = performance.now();
        this.open.set(path, held);
        return held.db;
      }
      // Replaced under it (the node has every process forget a copy first). Closing is safe: SQLite sees the file
      // moved (SQLITE_FCNTL_HAS_MOVED) and neither checkpoints nor unlinks `-wal` and `-shm`, the new copy's now.
      close(held.db);
    }
    const db = this.opener(path);
    this.open.set(path, { db, ino, usedAt: performance.now() });
    while (this.open.size > MAX_OPEN) this.forget(this.open.keys().next().value!);
    return db;
  }

  apply(path: string, events: ChangeEvent[]): ApplyOutcome {
    return this.applying(path, 'the copy', 'no copy yet', (db) => applyEvents(db, events), events.at(-1)!.version);
  }

  /** A primary's shipment as sent (`{"events": [...]}`), parsed here only: null when it is not one (a 400). */
  static shipment(body: Buffer): ChangeEvent[] | null {
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      return null;
    }
    const events = (parsed as { events?: unknown } | null)?.events;
    return Array.isArray(events) && events.length > 0 ? events as ChangeEvent[] : null;
  }

  /** A reference mirror's replica: one event applied in one transaction (applyToReplica). */
  applyToReplica(path: string, event: ChangeEvent): ApplyOutcome {
    return this.applying(path, 'the replica', 'no replica file', (db) => applyToReplica(db, event), event.version);
  }

  /** Runs `apply` on `path`'s connection: `version` when it applied, else the problem (a failed one closes it). */
  private applying(path: string, what: string, missing: string, apply: (db: DatabaseSync) => string | null, version: number): ApplyOutcome {
    let db: DatabaseSync;
    try {
      db = this.get(path);
    } catch (e) {
      return { problem: (e as NodeJS.ErrnoException).code === 'ENOENT' ? missing : `opening ${what} failed: ${(e as Error).message.slice(0, 120)}` };
    }
    try {
      const problem = apply(db);
      return problem === null ? { version } : { problem };
    } catch (e) {
      this.forget(path);
      return { problem: `applying failed: ${(e as Error).message.slice(0, 120)}` };
    }
  }

  /** A follower's copy: its version and newest event's id, on the connection its applies use; none is version 0. */
  state(path: string): StateOutcome {
    try {
      const db = this.get(path);
      const version = readVersion(db);
      const row = db.prepare("SELECT json_extract(event, '$.id') AS id FROM _scopebase_changes WHERE version = ?").get(version) as { id: string | null } | undefined;
      return { version, lastEventId: row?.id ?? null };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { version: 0, lastEventId: null };
      this.forget(path);
      return { problem: `reading the copy failed: ${(e as Error).message.slice(0, 120)}` };
    }
  }

  /** A reference mirror's replica's version and last event's id, read on the connection its applies use. */
  version(path: string): StateOutcome {
    try {
      return replicaState(this.get(path));
    } catch (e) {
      this.forget(path);
      return { problem: (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'no replica file' : `reading the replica failed: ${(e as Error).message.slice(0, 120)}` };
    }
  }

  forget(path: string): void {
    const held = this.open.get(path);
    this.open.delete(path);
    if (held) close(held.db);
  }

  closeIdle(idleMs: number): void {
    const now = performance.now();
    for (const [path, held] of this.open) {
      if (now - held.usedAt < idleMs) break; // least recently used first
      this.forget(path);
    }
  }

  closeAll(): void {
    for (const path of [...this.open.keys()]) this.forget(path);
  }
}

function close(db: DatabaseSync): void {
  try {
    if (db.isOpen) db.close();
  } catch {
    // already closed
  }
}

/**
 * A snapshot the reference mirror downloaded, made a replica (prepareReplica: triggers dropped, WAL on) on a
 * connection of its own, closed before the mirror renames the file. Answers its version.
 */
export function prepareReplicaFile(path: string): StateOutcome {
  return onceOpen(path, openReplica, prepareReplica, 'the snapshot could not be made a replica');
}

/**
 * A snapshot a cluster follower received, read and checkpointed on a connection of its own (openCopy's: WAL,
 * synchronous=FULL), closed before the node renames it over the copy. Answers its version. Runs none of the tenant's
 * expressions, but opening it parses the tenant's schema.
 */
export function checkSnapshotFile(path: string): ApplyOutcome {
  return onceOpen(path, openCopy, (db) => {
    const version = readVersion(db);
    db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
    return { version };
  }, 'reading it failed');
}

function onceOpen<T extends { version: number }>(path: string, opener: (path: string) => DatabaseSync, read: (db: DatabaseSync) => T, failed: string): T | { problem: string } {
  let db: DatabaseSync | undefined;
  try {
    db = opener(path);
    return read(db);
  } catch (e) {
    return { problem: `${failed}: ${(e as Error).message.slice(0, 120)}` };
  } finally {
    if (db) close(db);
  }
}
