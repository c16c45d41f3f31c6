// Decides which executor process runs what. Work waits here, not in a process's pipe, so nothing queues
// behind a runaway statement: writes start only on an idle process, reads pipeline a few deep, and a read
// caught behind a slow statement is hedged to another process (the first answer wins; reads are idempotent).
import type { Frame } from './protocol.ts';
import type { ExecutorLimits } from './handles.ts';
import { ExecutorProcess, LostError } from './process.ts';

export interface Job {
  write: boolean;
  header: object;
  body: Buffer | undefined;
  budgetMs: number;
  resolve: (f: Frame) => void;
  reject: (e: unknown) => void;
  settled: boolean;
  hedged: boolean;
}

/** Reads sent ahead to one process, so it never waits for the next message. */
const READ_DEPTH = 16;
/** A statement running longer than this may be a long one: new work avoids its process, waiting reads are hedged. */
const SLOW_MS = 20;

export class Scheduler {
  private readonly procs: ExecutorProcess[] = [];
  private readonly reads: Job[] = [];
  private readonly writes: Job[] = [];
  private readonly watchdog: NodeJS.Timeout;
  private readonly limits: ExecutorLimits;
  private readonly onRestart: (pid: number | undefined) => void;
  closing = false;
  private pumpScheduled = false;

  constructor(count: number, limits: ExecutorLimits, onRestart: (pid: number | undefined) => void) {
    this.limits = limits;
    this.onRestart = onRestart;
    for (let i = 0; i < count; i++) this.procs.push(this.spawn());
    this.watchdog = setInterval(() => this.tick(), 10).unref();
  }

  private spawn(): ExecutorProcess {
    return new ExecutorProcess(this.limits, (dead) => {
      const i = this.procs.indexOf(dead);
      if (i === -1 || this.closing) return;
      this.procs[i] = this.spawn();
      this.onRestart(dead.pid);
      this.pump();
    }, () => this.schedulePump());
  }

  /** Coalesces pumps: everything that arrived in one turn of the event loop leaves in one write per process. */
  private schedulePump(): void {
    if (this.pumpScheduled) return;
    this.pumpScheduled = true;
    setImmediate(() => {
      this.pumpScheduled = false;
      this.pump();
    });
  }

  run(write: boolean, header: object, body: Buffer | undefined, budgetMs: number): Promise<Frame> {
    return new Promise((resolve, reject) => {
      (write ? this.writes : this.reads).push({ write, header, body, budgetMs, resolve, reject, settled: false, hedged: false });
      this.schedulePump();
    });
  }

  /** Stops runaway statements, and hedges reads waiting behind a slow one. */
  private tick(): void {
    const now = performance.now();
    let hedged = false;
    for (const p of this.procs) {
      if (p.overBudget(now)) p.killForTimeout();
      else if (p.runningFor(now) > SLOW_MS) {
        for (const tag of p.waiting()) {
          const job = tag as Job;
          if (!job.write && !job.settled && !job.hedged) {
            job.hedged = true;
            this.reads.unshift(job);
            hedged = true;
          }
        }
      }
    }
    if (hedged) this.pump();
  }

  private pump(): void {
    if (this.reads.length === 0 && this.writes.length === 0) return;
    const now = performance.now();
    const ready = this.procs.filter((p) => p.alive && p.runningFor(now) <= SLOW_MS).sort((a, b) => a.inflight - b.inflight);
    // While a write waits, the least busy process takes no new reads, so it drains and the write can start.
    const reserved = this.writes.length > 0 ? ready[0] : undefined;
    for (const p of ready) {
      p.cork(); // one write per process for everything this pump sends it
      while (true) {
        if (p.inflight === 0 && this.writes.length > 0) this.dispatch(p, this.writes.shift()!);
        else if (p !== reserved && p.inflight < READ_DEPTH && this.reads.length > 0) {
          const job = this.reads.shift()!;
          if (!job.settled) this.dispatch(p, job);
        } else break;
      }
      p.uncork();
    }
  }

  private dispatch(p: ExecutorProcess, job: Job): void {
    p.send(job.header, job.body, job.budgetMs, job).then((frame) => {
      if (job.settled) return;
      job.settled = true;
      job.resolve(frame);
    }, (e: unknown) => {
      if (job.settled) return;
      if (e instanceof LostError && e.reason === 'unstarted' && !this.closing) {
        (job.write ? this.writes : this.reads).unshift(job);
        this.pump();
        return;
      }
      job.settled = true;
      job.reject(e);
    });
  }

  /** Sends one message to every live process (e.g. to forget a database). */
  broadcast(header: object, budgetMs: number): Promise<unknown> {
    return Promise.all(this.procs.map((p) => p.send(header, undefined, budgetMs).catch(() => undefined)));
  }

  pids(): (number | undefined)[] {
    return this.procs.map((p) => p.pid);
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.watchdog);
    for (const job of [...this.reads, ...this.writes]) job.reject(new LostError('unstarted'));
    await Promise.all(this.procs.map((p) => p.close()));
  }
}
