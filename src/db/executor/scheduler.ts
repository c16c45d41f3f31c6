// Decides which executor process runs what, fairly across tenants (repos). Work waits here, in a queue per
// tenant, not in a process's pipe: tenants are served in turn (round robin, one job each per turn), no tenant
// occupies more than `perTenant` processes at once besides its runaway pass (runaways.ts; placement.ts decides where
// each job goes); a read caught behind a slow statement is hedged to another process; waits are bounded (maxWait).
// Nothing here throws out of a timer or a callback: a throw there would stop every org's server.
import type { Frame } from './protocol.ts';
import { type ExecutorProcess, LostError } from './process.ts';
import { ProcessSet, SLOW_MS, type ProcessSetOptions } from './process-set.ts';
import { MAX_HEDGES, runAgain, Tenant, type Job } from './tenant.ts';
import { PinnedMessage, RunawayPasses } from './runaways.ts';
import { maxWait, QueueError, waitedTooLong } from './queue-limits.ts';
import { Placement, type PlacementOptions } from './placement.ts';

export type { Job } from './tenant.ts';

/** The watchdog's period. */
const TICK_MS = 10;

export interface SchedulerOptions extends Omit<ProcessSetOptions, 'onChange' | 'passes'>, PlacementOptions {
  /** Runaway passes in the server at once (runaways.ts); a tenant holds one at most. */
  runawayPasses: number;
  /** A job that could not start within this long is refused (QueueError 'timeout'). */
  queueTimeoutMs: number;
  /** Jobs waiting at once, per tenant and in all; past them a new job is refused (QueueError 'full'). */
  maxQueuedPerTenant: number;
  maxQueued: number;
}

export class Scheduler {
  private readonly procs: ProcessSet;
  private readonly passes: RunawayPasses;
  private readonly placement: Placement;
  private readonly tenants = new Map<string, Tenant>();
  /** Tenants with queued jobs, served in turn from `cursor`. */
  private readonly ring: Tenant[] = [];
  private cursor = 0;
  private queued = 0;
  private readonly watchdog: NodeJS.Timeout;
  private readonly opts: SchedulerOptions;
  closing = false;
  private pumpScheduled = false;

  constructor(opts: SchedulerOptions) {
    this.opts = opts;
    this.passes = new RunawayPasses(opts.runawayPasses, opts.perTenant);
    this.procs = new ProcessSet({ ...opts, onChange: () => this.schedulePump(), passes: this.passes });
    this.placement = new Placement(this.procs, this.passes, this.ring, opts);
    this.watchdog = setInterval(() => this.procs.guard(() => this.tick()), TICK_MS).unref();
  }

  /** Coalesces pumps: everything that arrived in one turn of the event loop leaves in one write per process. */
  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.procs.guard(() => this.pump());
    });
  }

  private tenant(key: string): Tenant {
    let t = this.tenants.get(key);
    if (!t) {
      t = new Tenant(key);
      this.tenants.set(key, t);
    }
    return t;
  }

  run(tenantKey: string, write: boolean, header: object, body: Buffer | undefined, budgetMs: number, enqueuedAt = performance.now()): Promise<Frame> {
    return new Promise((resolve, reject) => {
      if (this.closing) return reject(new LostError('unstarted'));
      const t = this.tenant(tenantKey);
      if (t.queued >= this.opts.maxQueuedPerTenant || this.queued >= this.opts.maxQueued) {
        const which = t.queued >= this.opts.maxQueuedPerTenant ? `${this.opts.maxQueuedPerTenant} requests of this repo` : `${this.opts.maxQueued} requests`;
        return reject(new QueueError('full', `the database service is overloaded: ${which} already wait for an executor; nothing of this request ran, retry after a second`));
      }
      this.enqueue(t, { tenant: t, write, header, body, budgetMs, enqueuedAt, resolve, reject, settled: false, hedges: 0, queued: false, started: false });
      this.schedulePump();
    });
  }

  private forgetIfIdle(t: Tenant): void {
    if (t.idle() && this.tenants.get(t.key) === t) this.tenants.delete(t.key);
  }

  private enqueue(t: Tenant, job: Job, front = false): void {
    t.push(job, front);
    this.queued++;
    if (!t.inRing) {
      t.inRing = true;
      this.ring.push(t);
    }
  }

  /** Stops runaway statements, refuses jobs that waited too long, and hedges reads waiting behind a slow one. */
  private tick(): void {
    const now = performance.now();
    let hedged = false;
    const stuck = new Map<Job, number>(); // copies of each read waiting behind a slow statement
    for (const p of this.procs.all) {
      const slow = p.runningFor(now) > SLOW_MS;
      p.yieldCpu(slow);
      // Judged again after this turn's I/O: on a busy loop the reply may already sit unread in the pipe.
      if (p.overBudget(now)) setImmediate(() => this.procs.guard(() => p.overBudget(performance.now()) && p.killForTimeout()));
      else if ((slow || p.pins > 0) && p.overTempSpace()) {
        // Only a statement running past SLOW_MS is measured (a quick one spills little before it ends); stopped after
        // this turn's I/O, and only if the message measured still runs (its reply may be in the pipe). A process
        // holding transactions is measured between messages too: savepoints keep their journals across statements,
        // each of them quick (nested ones grew gigabytes, none measured).
        const running = p.running();
        setImmediate(() => this.procs.guard(() => p.killFor('temp_space', running)));
      } else if (slow && p.overMemory()) {
        const running = p.running(); // as for temporary files: only the message measured, if it still runs
        setImmediate(() => this.procs.guard(() => p.killFor('memory', running)));
      } else if (slow && !this.closing) {
        for (const tag of p.waiting()) {
          // Untagged messages (broadcasts) and a transaction's (it runs where its connection is) are not jobs.
          if (tag instanceof PinnedMessage || tag === undefined) continue;
          const job = tag as Job;
          stuck.set(job, (stuck.get(job) ?? 0) + 1);
        }
      }
    }
    if (this.closing) return; // only statements past their limits are still stopped (see close)
    for (const [job, copies] of stuck) {
      // Only while every copy sent waits behind a slow statement (none runs, none waits behind a quick one), and none
      // waits in the queue. A read that writes a file (a snapshot, an export) is never hedged: two copies would write
      // one target.
      if (job.write || job.settled || job.queued || copies < job.copies! || job.hedges >= MAX_HEDGES || 'target' in (job.header as Record<string, unknown>)) continue;
      job.hedges++;
      this.enqueue(job.tenant, job, true);
      hedged = true;
    }
    // While the only free processes are starting, queues wait for capacity on its way, not behind work: not standing
    // (DB_QUEUE_TIMEOUT_MS alone holds). Work on a runaway pass was refused after 500 ms while they started (0.5-1.5 s).
    if (this.procs.onlyStarting(now)) for (const t of this.ring) t.lastEmptyAt = now;
    this.expire(now);
    this.passes.judge(this.procs.all, now);
    this.procs.maintain(now);
    // Also while jobs wait: one may wait for a started process that has since turned slow (see startedFor).
    if (hedged || this.queued > 0) this.pump();
  }

  /** Jobs that could not start in time (maxWait) are refused; a refused job never runs. */
  private expire(now: number): void {
    for (const t of this.ring) {
      const limit = maxWait(t.lastEmptyAt, now, this.opts.queueTimeoutMs, this.opts.queueTargetMs);
      for (const job of t.expire(now - limit)) {
        this.queued--;
        if (job.settled) continue;
        // A hedged read whose first copy runs goes on there; one whose copy still waits behind a slow statement is
        // refused like one that never started (a read changes nothing; its late answer is dropped): it waited up to
        // DB_QUERY_TIMEOUT_MS when the repo's share stayed full.
        if (job.started && (job.write || this.procs.all.some((p) => p.runningTag() === job))) continue;
        job.settled = true;
        job.reject(waitedTooLong(now - job.enqueuedAt));
      }
    }
  }

  private pump(): void {
    if (this.queued === 0) return;
    const now = performance.now();
    const ready = this.procs.free(now);
    if (ready.length === 0) return;
    this.passes.judge(this.procs.all, now);
    // Whichever has waited longer goes first, a read or a write (writes always first starved reads under a steady
    // mix: reads' p99 220-234 ms, writes' 19-21 ms; now 42-46 and 49-59). While a write goes first, the least busy
    // process takes no new reads, so it drains and the write can start; while a read does, writes wait a pump.
    const { oldestWrite, oldestRead } = this.placement.oldestWaiting(ready);
    const writesFirst = oldestWrite <= oldestRead;
    const open = ready.filter((p) => p.pinnedBy.size === 0 || p.shared); // not one held by a repo's transactions
    const reserved = writesFirst && oldestWrite < Infinity && open.length > 0 ? open.reduce((a, b) => (b.inflight < a.inflight ? b : a)) : undefined;
    for (const p of ready) p.cork(); // one write per process for everything this pump sends it
    try {
      // Repos running nothing first (max-min fairness): a quiet repo's read no longer waits while a busy one's queued
      // writes take each process as it frees (in-server p99 1.5 ms alone, 6 ms under a rate-limited flood).
      for (let i = 0; i < this.ring.length;) {
        const t = this.ring[i]!;
        if (t.onProcs.size === 0) this.dispatchOne(t, ready, reserved, writesFirst);
        if (t.queued > 0) i++;
        else this.leaveRing(i);
      }
      let progress = true;
      while (progress && this.ring.length > 0) {
        progress = false;
        for (let n = this.ring.length; n > 0 && this.ring.length > 0; n--) {
          if (this.cursor >= this.ring.length) this.cursor = 0;
          const t = this.ring[this.cursor]!;
          if (this.dispatchOne(t, ready, reserved, writesFirst)) progress = true;
          if (t.queued === 0) this.leaveRing(this.cursor);
          else this.cursor++;
        }
      }
    } finally {
      for (const p of ready) p.uncork();
    }
  }

  /** Takes the tenant at `i` out of the ring (its queue is empty); the cursor keeps pointing at the same next tenant. */
  private leaveRing(i: number): void {
    const t = this.ring[i]!;
    t.inRing = false;
    this.ring.splice(i, 1);
    if (i < this.cursor) this.cursor--;
    this.forgetIfIdle(t);
  }

  /** Sends one job of tenant `t`, if one can go now (Placement.choose). */
  private dispatchOne(t: Tenant, ready: ExecutorProcess[], reserved: ExecutorProcess | undefined, writesFirst: boolean): boolean {
    const go = this.placement.choose(t, ready, reserved, writesFirst);
    return go !== undefined && this.dispatch(go.p, t.take(go.job));
  }

  private dispatch(p: ExecutorProcess, job: Job): boolean {
    this.queued--;
    if (job.settled) return true; // a hedged copy whose first send already answered
    if (!job.started && !job.write) {
      // Between ticks too: a read that waited past its allowance is refused rather than run late.
      const now = performance.now();
      if (now - job.enqueuedAt > maxWait(job.tenant.lastEmptyAt, now, this.opts.queueTimeoutMs, this.opts.queueTargetMs)) {
        job.settled = true;
        job.reject(waitedTooLong(now - job.enqueuedAt));
        return true;
      }
    }
    job.started = true;
    const sentAt = performance.now();
    job.firstSentAt ??= sentAt;
    job.sentTo = p;
    job.copies = (job.copies ?? 0) + 1;
    const t = job.tenant;
    const done = this.occupy(t, p);
    p.send(job.header, job.body, job.budgetMs, job).then((frame) => {
      job.copies!--;
      done();
      if (!job.write) t.readServiceMs += (performance.now() - sentAt - t.readServiceMs) / 16;
      if (job.settled) return;
      job.settled = true;
      job.resolve(frame);
    }, (e: unknown) => {
      job.copies!--;
      done();
      // Another copy (a hedged read's) still runs and will answer it: running this one again made a third, which could
      // outlive every limit (a runaway's copy started as the server closed).
      if (job.settled || job.copies! > 0) return;
      const rerun = e instanceof LostError && !this.closing && (e.reason === 'unstarted' || (e.reason === 'crash' && runAgain(job)));
      if (rerun) {
        // No copy runs anywhere now: it waits as one that never started (expire would otherwise drop it unanswered).
        if (job.copies === 0) job.started = false;
        this.enqueue(t, job, true);
        this.schedulePump();
        return;
      }
      job.settled = true;
      job.reject(e);
    });
    return true;
  }

  /** The process an interactive transaction of repo `tenantKey` will run on (see ProcessSet.pin). */
  pin(tenantKey: string): ExecutorProcess | undefined {
    return this.procs.pin(tenantKey);
  }

  unpin(p: ExecutorProcess, tenantKey: string): void {
    this.procs.unpin(p, tenantKey);
  }

  /**
   * Sends a message of a pinned transaction straight to its process; if that process died, the transaction is gone and
   * the message is not sent ('unstarted': it did not die of this message's limits, which were another's).
   */
  runOn(p: ExecutorProcess, tenantKey: string, header: object, body: Buffer | undefined, budgetMs: number): Promise<Frame> {
    if (!p.alive || this.closing) {
      // Stopped for the temporary files or memory its transactions held (this repo's alone, measured between messages
      // too): that limit is theirs to hear. A runaway or a crash was another message's: this one never started.
      const limit = !this.closing && (p.stoppedFor === 'temp_space' || p.stoppedFor === 'memory') ? p.stoppedFor : null;
      return Promise.reject(limit ? new LostError(limit, p.limitBytes()) : new LostError('unstarted'));
    }
    const t = this.tenant(tenantKey);
    // Tagged with its repo: a long statement of a transaction holds the repo's runaway pass as a job's does.
    return p.send(header, body, budgetMs, new PinnedMessage(t)).finally(this.occupy(t, p));
  }

  /** Counts a started job of `t` on `p`; the callback returned uncounts it. */
  private occupy(t: Tenant, p: ExecutorProcess): () => void {
    t.onProcs.set(p, (t.onProcs.get(p) ?? 0) + 1);
    return () => {
      const n = (t.onProcs.get(p) ?? 1) - 1;
      if (n <= 0) t.onProcs.delete(p);
      else t.onProcs.set(p, n);
      this.forgetIfIdle(t);
    };
  }

  /** Sends one message to every live process (e.g. to forget a database). */
  broadcast(header: object, budgetMs: number): Promise<unknown> {
    return this.procs.broadcast(header, budgetMs);
  }

  pids(): (number | undefined)[] {
    return this.procs.all.map((p) => p.pid);
  }

  /** Jobs waiting for an executor, for metrics. */
  get waiting(): number {
    return this.queued;
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const t of this.ring) {
      for (const job of t.drain()) {
        if (job.settled) continue;
        job.settled = true;
        job.reject(new LostError('unstarted'));
      }
    }
    this.ring.length = 0;
    this.queued = 0;
    // The watchdog runs until every process has closed: a statement still running (a hedged copy of a runaway, sent
    // again when its first copy was lost) was no longer stopped at its limit, and held the close for ever.
    try {
      await this.procs.close();
    } finally {
      clearInterval(this.watchdog);
    }
  }
}
