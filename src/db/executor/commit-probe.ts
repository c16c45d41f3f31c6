// After a lost reply, whether the write committed is asked by its token, never guessed: a write is not run twice.
import { LostError } from './process.ts';
import type { Scheduler } from './scheduler.ts';
import { LostCommitError, tenantOfPath } from './pool-errors.ts';
import type { PoolOptions } from './pool.ts';
import type { Scope } from '../contract.ts';
import { ApiError } from '../../shared/errors.ts';

/** What the probe found: which requests of the write committed, and the database's version then (its last commit). */
export interface Probed {
  committed: (request: number) => boolean;
  version: number;
}

/**
 * After a lost reply: which requests of the write with this token committed (by their place in the group the pool
 * sent; a write of one request committed whole or not at all). `created`: it was creating its database, which the
 * executor removes when nothing of it committed (still at version 0, or killed before its internal tables).
 * A probe lost in turn (its process killed too, as when every executor is; or stopped on a starved machine) is
 * sent again, twice at most: it only reads, and removes only what nothing committed to.
 */
export async function probeRequests(scheduler: Scheduler, timeoutMs: number, path: string, token: string, created: boolean): Promise<Probed> {
  for (let attempt = 1; ; attempt++) {
    try {
      const probe = await scheduler.run(tenantOfPath(path), true, { op: 'probe', path, token, created }, undefined, timeoutMs);
      const version = probe.header.version as number;
      const requests = probe.header.requests as number[] | undefined;
      if (requests === undefined) return { committed: () => probe.header.committed === true, version };
      const committed = new Set(requests);
      return { committed: (request) => committed.has(request), version };
    } catch (e) {
      if (!(e instanceof LostError) || e.reason === 'unstarted' || scheduler.closing || attempt >= 3) throw e;
    }
  }
}

/** When a failed probe is asked again in the background (ms after it failed, each after the one before). */
const LATE_PROBES_MS = [1000, 2000, 4000, 8000, 15_000, 30_000, 30_000, 30_000, 30_000, 30_000];

/** A background re-probe run by its database's write lane (a write that was creating it: write-lanes.ts). */
export interface LaneProbe {
  /** Asks the probe in the lane, `created` while no other write has run there since. */
  probe(): Promise<Probed>;
  /** The re-probe is over, answered or given up: the creation it held is let go. */
  done(): void;
}

/**
 * The probe failed (its executors lost again, or none free in time), so the caller was told `committed: null`; but a
 * version that did commit must reach mirrors and a cluster's follower now (`onLateCommit`), not at the database's
 * next write. Asked again in the background until it answers (about 3 minutes at most; then the next write or restart
 * reports it). `created` only through `lane`, which runs it where no later write can be making the database. Nothing
 * here throws: it runs from timers.
 */
export function probeLater(scheduler: Scheduler, opts: Pick<PoolOptions, 'timeoutMs' | 'onCommit' | 'onLateCommit' | 'onError'>, scope: Scope, path: string, token: string, requests: number, lane?: LaneProbe): void {
  const ask = lane?.probe ?? (() => probeRequests(scheduler, opts.timeoutMs, path, token, false));
  const attempt = (n: number) => {
    if (n >= LATE_PROBES_MS.length) return lane?.done();
    setTimeout(() => {
      if (scheduler.closing) return lane?.done();
      ask().then(({ committed, version }) => {
        lane?.done();
        const report = opts.onLateCommit ?? opts.onCommit; // replicated too: no 200 or 503 of its own ships it
        for (let i = 0; i < requests; i++) if (committed(i)) return report(scope, version);
      }, () => attempt(n + 1)).catch((e: unknown) => opts.onError?.(e));
    }, LATE_PROBES_MS[n]).unref();
  };
  attempt(0);
}

/** After a lost reply: did the write with this token (one request: an interactive transaction's COMMIT) commit? */
export async function probeCommitted(scheduler: Scheduler, timeoutMs: number, path: string, token: string, created: boolean): Promise<boolean> {
  return (await probeRequests(scheduler, timeoutMs, path, token, created)).committed(0);
}

/**
 * The process died during a transaction's COMMIT: did it commit? (SQLite's journal makes it all or nothing.) A
 * version committed so is reported (`onCommit`: mirrors, metrics) as one answered 200 is. `inLane`: where the
 * re-probe of a transaction that was creating its database runs, should this probe fail.
 */
export async function lostCommit(scheduler: Scheduler, opts: Pick<PoolOptions, 'timeoutMs' | 'onCommit' | 'onLateCommit' | 'onError'>, scope: Scope, path: string, token: string, created: boolean, inLane?: () => LaneProbe | undefined): Promise<ApiError> {
  let probed: Probed | null;
  try {
    probed = await probeRequests(scheduler, opts.timeoutMs, path, token, created);
  } catch {
    probed = null;
    probeLater(scheduler, opts, scope, path, token, 1, inLane?.());
  }
  const message = 'the executor stopped during this transaction\'s commit; ';
  if (probed?.committed(0)) {
    opts.onCommit(scope, probed.version);
    return new LostCommitError(`${message}it committed`, probed.version);
  }
  const committed = probed === null ? null : false;
  const what = committed === null ? 'whether it committed is unknown: read the data back' : 'nothing of it was applied';
  return new ApiError('unavailable', `${message}${what}`, { committed }, { 'retry-after': '1' });
}
