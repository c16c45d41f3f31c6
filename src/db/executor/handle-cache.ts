// The open databases of an executor process, least recently used first: closing the oldest bounds memory and file
// descriptors; a read on a full disk gets a handle that needs no shared-memory file.
import { statSync } from 'node:fs';
import { isDiskFull } from '../../shared/errors.ts';
import { DbHandle, EMPTY, type ExecutorLimits } from './handles.ts';

/** Open handles, least recently used first; closing the oldest bounds memory and file descriptors. */
export class HandleCache {
  private readonly open = new Map<string, DbHandle>();
  private readonly limits: ExecutorLimits;
  private emptyHandle: DbHandle | null = null;

  constructor(limits: ExecutorLimits) {
    this.limits = limits;
  }

  get(path: string, create = false): DbHandle {
    const h = this.open.get(path);
    if (h) {
      this.open.delete(path);
      this.open.set(path, h);
      h.usedAt = performance.now();
      return h;
    }
    const handle = new DbHandle(path, create, this.limits);
    this.open.set(path, handle);
    while (this.open.size > this.limits.maxOpen) {
      const [oldest, old] = this.open.entries().next().value!;
      this.open.delete(oldest);
      old.close();
    }
    return handle;
  }

  /**
   * Closes connections unused for `idleMs`. Operations run synchronously, so between them (where a timer calls
   * this) no statement is running; a connection inside a transaction is kept all the same.
   */
  closeIdle(idleMs: number): void {
    const now = performance.now();
    for (const [path, handle] of this.open) {
      if (now - handle.usedAt < idleMs) break; // least recently used first: the rest are younger
      if (handle.db.isTransaction) continue;
      this.open.delete(path);
      handle.close();
    }
  }

  /**
   * A handle for one read when opening `path` as usual failed for a full disk: SQLite must make (or, as the first
   * connection, truncate and grow again) the database's shared-memory file, and cannot. Null when the error is
   * another, or when no fallback can read it (the caller answers the disk-full error). The caller closes it after
   * the operation.
   * - No WAL content (the last connection checkpointed it into the file): the file alone is the database, and an
   *   immutable, read-only connection reads it with no lock and no file of its own.
   * - WAL content (a checkpoint the full disk refused, a killed process): an exclusive-locking connection reads the
   *   WAL with its index in memory. It holds the database's lock for the one read; if a connection elsewhere has
   *   the database open (so its shared memory exists), a usual open is tried once more instead.
   */
  readWhileDiskFull(path: string, err: unknown): DbHandle | null {
    if (!isDiskFull(err)) return null;
    let walBytes = 0;
    try {
      walBytes = statSync(`${path}-wal`).size;
    } catch {
      // no WAL file: nothing outside the main file
    }
    if (walBytes === 0) return new DbHandle(path, false, this.limits, 'immutable');
    let exclusive: DbHandle | null = null;
    try {
      exclusive = new DbHandle(path, false, this.limits, 'exclusive');
      exclusive.version(); // takes the lock now: a busy database is known here, not halfway through the read
      return exclusive;
    } catch {
      exclusive?.close();
    }
    try {
      return new DbHandle(path, false, this.limits);
    } catch {
      return null;
    }
  }

  /** An empty database with the internal tables, in memory, for describing statements on a database not yet made. */
  empty(): DbHandle {
    this.emptyHandle ??= new DbHandle(EMPTY, true, this.limits);
    return this.emptyHandle;
  }

  forget(path: string): void {
    this.open.get(path)?.close();
    this.open.delete(path);
  }

  closeAll(): void {
    for (const h of this.open.values()) h.close();
    this.open.clear();
    this.emptyHandle?.close();
    this.emptyHandle = null;
  }
}
