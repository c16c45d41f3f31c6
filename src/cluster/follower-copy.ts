// The follower's side of one database: its copy is a file at the same place a primary keeps it (so promotion is only
// a placement change). This event loop never opens it: applying events runs the tenant's expressions and even a
// version read parses the tenant's schema, whose size the tenant picks, so executors do both (DbService.applyToCopy,
// copyState, checkSnapshot: src/db/executor/copy-ops.ts). Here, only file operations: a snapshot's rename and fsyncs.
import { mkdirSync, renameSync } from 'node:fs';
import { open as fsOpen } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Scope } from '../db/contract.ts';
import type { DbService } from '../db/service.ts';
import { removeCopy } from '../db/history/rebuild.ts';
import { ApiError } from '../shared/errors.ts';

export interface CopyState {
  /** 0 when there is no copy. */
  version: number;
  /** The id of the copy's newest change-log event: equal ids at equal versions mean one history. */
  lastEventId: string | null;
  /** Why the copy could not be read (then answered as none: the primary replaces it with a snapshot). */
  problem?: string;
}

/** The copy's state, read by an executor under `budgetMs`. Throws (503) only when no executor could take it. */
export async function copyState(db: DbService, scope: Scope, budgetMs: number): Promise<CopyState> {
  const state = await db.copyState(scope, budgetMs);
  return 'problem' in state ? { version: 0, lastEventId: null, problem: state.problem } : state;
}

/**
 * Puts a received snapshot in place of the copy: read and checkpointed by an executor, fsynced, renamed over it, the
 * directory fsynced. Returns its version. Every executor process must have let go of the copy first (DbService.forget).
 * Runs none of the tenant's expressions.
 */
export async function installSnapshot(db: DbService, scope: Scope, received: string): Promise<number> {
  const checked = await db.checkSnapshot(scope, received);
  if ('problem' in checked) {
    // Stopped: a schema too big to open within DB_QUERY_TIMEOUT_MS (or a lost executor); the primary tries again later.
    if ('stopped' in checked) throw new ApiError('unavailable', `the snapshot could not be installed now: ${checked.problem}`, undefined, { 'retry-after': '1' });
    throw new ApiError('invalid_request', `the body is not a scopebase database: ${checked.problem}`);
  }
  await fsyncPath(received); // off the event loop: a file of up to DB_MAX_SIZE_BYTES takes seconds to reach the disk
  const path = db.databasePath(scope);
  removeCopy(path);
  mkdirSync(dirname(path), { recursive: true });
  renameSync(received, path);
  await fsyncPath(dirname(path));
  return checked.version;
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
