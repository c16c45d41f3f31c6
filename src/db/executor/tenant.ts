// One tenant's (repo's) share of the scheduler: its waiting reads and writes, oldest first, and the processes
// its started jobs occupy. Reads are served oldest first, but newest first while the repo is overloaded (adaptive
// LIFO, "Fail at Scale", Facebook 2015; the scheduler judges when, see Placement.lifoBefore): the reads served are
// then served promptly, and the old ones, which would be served late or not at all, are the ones refused.
import type { Frame } from './protocol.ts';
import type { ExecutorProcess } from './process.ts';

export interface Job {
  tenant: Tenant;
  write: boolean;
  header: object;
  body: Buffer | undefined;
  budgetMs: number;
  /** When the request asked for an executor (for writes: when the group's oldest request reached its lane). */
  enqueuedAt: number;
  resolve: (f: Frame) => void;
  reject: (e: unknown) => void;
  settled: boolean;
  /** Times sent again because every copy sent waited behind a slow statement (at most MAX_HEDGES). */
  hedges: number;
  /** A copy of it waits in its repo's queue: not hedged again until that copy is sent. */
  queued: boolean;
  started: boolean;
  sentTo?: ExecutorProcess;
  /** Copies sent and not yet answered or lost (a hedged read can have 1 + MAX_HEDGES). */
  copies?: number;
  /** When its current run's deadline began (its first send; reset with what is left at a rerun, runAgain). */
  firstSentAt?: number;
  /** Times it ran again after its process died under it. */
  crashes?: number;
  /** Put back at the head of its queue (hedged, or to run once more): served next even while reads go newest first. */
  urgent?: boolean;
}

/**
 * Copies of a read sent again while every copy sent waits behind a slow statement. One was too few: two runaways' copies
 * went down one new process's pipe, the second waited there until both were stopped, and was then refused (503).
 */
export const MAX_HEDGES = 2;

/** Reruns of a read whose process died under it (runAgain), or of a write that did not commit (write-lanes.ts). */
export const MAX_CRASH_RERUNS = 3;

/**
 * May a read whose process died under it (not stopped for its own limits: those are its doing) run again? While its
 * deadline (first start + DB_QUERY_TIMEOUT_MS) allows, and MAX_CRASH_RERUNS times at most: a statement that crashes
 * its process by itself would otherwise take one process per run. A rerun has what is left of the deadline, and waits
 * for an executor afresh (judged by its first wait, one that ran a second was refused 503 at once).
 */
export function runAgain(job: Job): boolean {
  const now = performance.now();
  const left = job.firstSentAt! + job.budgetMs - now;
  if (job.write || left <= 0 || (job.crashes ?? 0) >= MAX_CRASH_RERUNS) return false;
  job.crashes = (job.crashes ?? 0) + 1;
  job.firstSentAt = now;
  job.budgetMs = left;
  job.enqueuedAt = now;
  return true;
}

/** Jobs oldest first, taken from either end in O(1) (shift compacts itself). */
class Queue<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  peek(): T | undefined {
    return this.items[this.head];
  }

  peekLast(): T | undefined {
    return this.length > 0 ? this.items[this.items.length - 1] : undefined;
  }

  pop(): T | undefined {
    return this.length > 0 ? this.items.pop() : undefined;
  }

  push(item: T): void {
    this.items.push(item);
  }

  unshift(item: T): void {
    if (this.head > 0) this.items[--this.head] = item;
    else this.items.unshift(item);
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head]!;
    this.items[this.head++] = undefined as T;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  drain(): T[] {
    const all = this.items.slice(this.head);
    this.items = [];
    this.head = 0;
    return all;
  }
}

export class Tenant {
  readonly key: string;
  private readonly reads = new Queue<Job>();
  private readonly writes = new Queue<Job>();
  /** Started, unanswered jobs per process. */
  readonly onProcs = new Map<ExecutorProcess, number>();
  inRing = false;
  /** When its queue was last empty: a queue not empty for a while is standing (see maxWait, queue-limits.ts). */
  lastEmptyAt = performance.now();
  /** How long its reads take once sent to a process (ms, a moving average): with the queue's length, the wait ahead. */
  readServiceMs = 0;

  constructor(key: string) {
    this.key = key;
  }

  get queued(): number {
    return this.reads.length + this.writes.length;
  }

  get readsQueued(): number {
    return this.reads.length;
  }

  push(job: Job, front: boolean): void {
    // Empty until now, so not standing: a repo whose last job still runs kept the time its queue last emptied, and a
    // write that came after a long one of its own was judged by the standing target (refused after 50 ms waiting).
    if (this.queued === 0) this.lastEmptyAt = performance.now();
    const q = job.write ? this.writes : this.reads;
    job.urgent = front;
    job.queued = true;
    if (front) q.unshift(job);
    else q.push(job);
  }

  peekWrite(): Job | undefined {
    return this.writes.peek();
  }

  /** The read to serve next: the oldest, or the newest if the oldest has waited since before `lifoBefore`. */
  peekRead(lifoBefore: number): Job | undefined {
    const oldest = this.reads.peek();
    return oldest && !oldest.urgent && oldest.enqueuedAt < lifoBefore ? this.reads.peekLast() : oldest;
  }

  writeWaiting(): boolean {
    return this.writes.length > 0;
  }

  /** Its read that has waited longest (the head of its queue, whatever order reads are served in). */
  oldestRead(): Job | undefined {
    return this.reads.peek();
  }

  /** When its oldest waiting write was enqueued (Infinity: none waits). */
  oldestWriteAt(): number {
    return this.writes.peek()?.enqueuedAt ?? Infinity;
  }

  /** Removes `job`, which is the head or the tail of its queue (from peekRead/peekWrite). */
  take(job: Job): Job {
    const q = job.write ? this.writes : this.reads;
    if (q.peek() === job) q.shift();
    else q.pop();
    job.queued = false;
    if (this.queued === 0) this.lastEmptyAt = performance.now();
    return job;
  }

  /** Removes and returns the jobs at the heads of the queues that have waited since before `cutoff`. */
  expire(cutoff: number): Job[] {
    const out: Job[] = [];
    for (const q of [this.reads, this.writes]) {
      while (q.length > 0 && q.peek()!.enqueuedAt < cutoff) {
        const job = q.shift()!;
        job.queued = false;
        out.push(job);
      }
    }
    if (out.length > 0 && this.queued === 0) this.lastEmptyAt = performance.now();
    return out;
  }

  drain(): Job[] {
    return [...this.reads.drain(), ...this.writes.drain()];
  }

  idle(): boolean {
    return !this.inRing && this.queued === 0 && this.onProcs.size === 0;
  }
}
