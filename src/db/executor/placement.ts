// Where a repo's queued job may go (scheduler.ts sends it): a process within the repo's share, or beyond it on its
// runaway pass (runaways.ts); a write only to an idle process, a read about 1 ms deep; a process that has started
// before one still starting; and which waits first, the oldest write or the oldest read that could go. Decides only.
import type { ExecutorProcess } from './process.ts';
import type { ProcessSet, ProcessSetOptions } from './process-set.ts';
import type { Job, Tenant } from './tenant.ts';
import { occupied, type RunawayPasses } from './runaways.ts';
import { STANDING_AFTER_MS } from './queue-limits.ts';

/**
 * Reads sent ahead to one process, so it never waits for the next message: about PIPELINE_MS of its work, at most
 * READ_DEPTH. Deeper, reads would wait in its pipe, where the scheduler can neither hedge nor refuse them.
 */
const READ_DEPTH = 16;
const PIPELINE_MS = 1;

export interface PlacementOptions extends Pick<ProcessSetOptions, 'processes'> {
  /** Processes one tenant may occupy at once (the others stay free for other tenants), besides its runaway pass. */
  perTenant: number;
  /** While a tenant's queue stands (see maxWait), a job may wait only this long. */
  queueTargetMs: number;
}

function depth(p: ExecutorProcess): number {
  return Math.max(1, Math.min(READ_DEPTH, Math.floor(PIPELINE_MS / Math.max(p.serviceMs, 0.001))));
}

export class Placement {
  private readonly procs: ProcessSet;
  private readonly passes: RunawayPasses;
  /** The scheduler's tenants with queued jobs (read, never changed here). */
  private readonly ring: readonly Tenant[];
  private readonly opts: PlacementOptions;

  constructor(procs: ProcessSet, passes: RunawayPasses, ring: readonly Tenant[], opts: PlacementOptions) {
    this.procs = procs;
    this.passes = passes;
    this.ring = ring;
    this.opts = opts;
  }

  /**
   * May tenant `t` send work to process `p`? Not to one holding another repo's transactions (ProcessSet.pin): its
   * runaway would kill them with the process. Else where it already runs, always; elsewhere only below its share.
   */
  private allowed(t: Tenant, p: ExecutorProcess): boolean {
    if (p.pinnedBy.size > 0 && !p.shared && !p.pinnedBy.has(t.key)) return false;
    if (t.onProcs.has(p)) return true;
    if (!this.belowShare(t)) return false;
    if (occupied(t, performance.now()) < this.opts.perTenant) return true;
    // Beyond its share, on its runaway pass: only a process that has started, and not the last idle one (other repos
    // would wait for the next to start, 0.1-1 s on a loaded machine) unless its queue is a burst, not a standing flood,
    // and no other repo waits: kept idle then, its other databases were refused (503) while the next ones started.
    if (!p.started) return false;
    if (this.procs.all.some((q) => q !== p && q.started && q.alive && !q.closing && q.inflight === 0 && (q.pinnedBy.size === 0 || q.shared))) return true;
    return performance.now() - t.lastEmptyAt <= STANDING_AFTER_MS && !this.othersWait(t);
  }

  /** Does a repo other than `t` wait with work it may start within its share (not itself on a runaway pass)? */
  private othersWait(t: Tenant): boolean {
    return this.ring.some((u) => u !== t && u.queued > 0 && occupied(u, performance.now()) < this.opts.perTenant && this.belowShare(u));
  }

  /** May `t` start work on one more process? Those running a statement with a runaway pass do not count (runaways.ts). */
  private belowShare(t: Tenant): boolean {
    return this.passes.share(t, performance.now()) < this.opts.perTenant;
  }

  /**
   * When the oldest write and the oldest read that could go now were enqueued (Infinity: none). A write could once a
   * process drains (its tenant below its share); a read only where a ready process has room it may use: a read that
   * cannot go (its repo's share held by its own slow statements) must not hold every write back.
   */
  oldestWaiting(ready: ExecutorProcess[]): { oldestWrite: number; oldestRead: number } {
    let oldestWrite = Infinity;
    let oldestRead = Infinity;
    for (const t of this.ring) {
      if (this.belowShare(t)) oldestWrite = Math.min(oldestWrite, t.oldestWriteAt());
      const read = t.oldestRead();
      if (read && read.enqueuedAt < oldestRead && ready.some((p) => p.inflight < depth(p) && this.allowed(t, p) && p !== read.sentTo)) oldestRead = read.enqueuedAt;
    }
    return { oldestWrite, oldestRead };
  }

  /** The job of tenant `t` that can go now and the process it goes to, if any; its write only while writes go first. */
  choose(t: Tenant, ready: ExecutorProcess[], reserved: ExecutorProcess | undefined, writesFirst: boolean): { p: ExecutorProcess; job: Job } | undefined {
    const write = writesFirst ? t.peekWrite() : undefined;
    if (write) {
      let idle: ExecutorProcess | undefined;
      for (const p of ready) if (p.inflight === 0 && (!idle || (p.started && !idle.started)) && this.allowed(t, p)) idle = p;
      if (idle && (idle.started || !this.startedFor(t, ready, undefined))) return { p: idle, job: write };
      // The tenant's own reads hold its share: hold its reads back so they drain and the write can start.
      if (!this.belowShare(t)) return undefined;
    }
    const read = t.peekRead(this.lifoBefore(t));
    if (!read) return undefined;
    // The process kept draining for a write may take one read of a repo running nothing, when idle: the write then
    // waits one read, and a busy repo's queued writes cannot keep every other repo's reads waiting.
    const light = t.onProcs.size === 0;
    let best: ExecutorProcess | undefined;
    for (const p of ready) {
      if ((p === reserved && !(light && p.inflight === 0)) || p.inflight >= depth(p) || !this.allowed(t, p) || read.sentTo === p) continue;
      // One that has started first (within its pipeline depth, it answers sooner than one still starting), then the least busy.
      if (!best || (p.started && !best.started) || (p.started === best.started && p.inflight < best.inflight)) best = p;
    }
    return best && (best.started || !this.startedFor(t, ready, read)) ? { p: best, job: read } : undefined;
  }

  /**
   * Could a started process take `t`'s job soon (it is busy, not slow)? Then the job waits a pump for it rather than go
   * to one still starting: a start takes 0.1-1 s on a loaded machine, and a runaway's round spawns several.
   */
  private startedFor(t: Tenant, ready: ExecutorProcess[], read: Job | undefined): boolean {
    return ready.some((p) => p.started && p !== read?.sentTo && this.allowed(t, p));
  }

  /**
   * Reads enqueued before this go newest first (see tenant.ts): all of them while served in order the newest would
   * wait past the target (its queue's length × its reads' service time ÷ the processes it may use): it is
   * overloaded, and its oldest reads would be refused anyway; else once the oldest has waited the target (a burst).
   * A pool of clients a little past the executors waits less than the target and stays first come, first served:
   * newest first would starve its oldest into refusals that first come, first served does not make.
   */
  private lifoBefore(t: Tenant): number {
    const now = performance.now();
    const lanes = Math.max(1, Math.min(this.opts.perTenant, this.opts.processes));
    return (t.readsQueued * t.readServiceMs) / lanes > this.opts.queueTargetMs ? Infinity : now - this.opts.queueTargetMs;
  }
}
