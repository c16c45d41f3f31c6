// The executor processes: DB_EXECUTORS of them kept free of slow statements, extra ones while some are stuck, a dead
// or retired one replaced. Every callback here runs guarded: an error is reported, never thrown into the event loop.
import type { ExecutorLimits } from './handles.ts';
import { ExecutorProcess } from './process.ts';
import type { RunawayPasses } from './runaways.ts';

/** A statement running longer than this may be a long one: its process does not count as free. */
export const SLOW_MS = 20;
/** How long a process that died young (it may not be able to start at all) waits before it is replaced. */
const RESPAWN_PAUSE_MS = 200;
/** An extra process idle this long, while enough others are free, is closed. */
const RETIRE_IDLE_MS = 5000;

export interface ProcessSetOptions {
  /** Processes free of slow statements to keep. */
  processes: number;
  /** Processes in all, slow ones included; those running a statement with a runaway pass come on top (runaways.ts). */
  maxProcesses: number;
  limits: ExecutorLimits;
  /** A process died and is replaced; `why` says why it was stopped, when it was on purpose (ExecutorProcess.replacedFor). */
  onRestart: (pid: number | undefined, why: ExecutorProcess['replacedFor']) => void;
  onError: (e: unknown) => void;
  /** A process came or answered: work may go now. */
  onChange: () => void;
  /** The statements running with a runaway pass (judged by the scheduler). */
  passes: RunawayPasses;
}

export class ProcessSet {
  readonly all: ExecutorProcess[] = [];
  private readonly opts: ProcessSetOptions;
  private spawnAfter = 0;
  private closing = false;
  /** Retired processes still closing their databases (a broadcast waits for them: see `broadcast`). */
  private readonly retiring = new Set<Promise<void>>();

  constructor(opts: ProcessSetOptions) {
    this.opts = opts;
    for (let i = 0; i < opts.processes; i++) this.all.push(this.spawn());
  }

  /** Runs a callback of a timer or an event: an error is reported, never thrown into the event loop. */
  guard(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.opts.onError(e);
    }
  }

  /** Alive and not running a slow statement. */
  free(now: number): ExecutorProcess[] {
    return this.all.filter((p) => p.alive && !p.closing && p.runningFor(now) <= SLOW_MS);
  }

  /** Free and open to every repo's work: holding no repo's transaction of its own (see pin). */
  private general(now: number): ExecutorProcess[] {
    return this.free(now).filter((p) => p.pinnedBy.size === 0 || p.shared);
  }

  /**
   * No started process is free for general work, and one is starting: what waits, waits for capacity on its way (a
   * start takes 0.1-1 s on a loaded machine), not behind work.
   */
  onlyStarting(now: number): boolean {
    const general = this.general(now);
    return general.length > 0 && general.every((p) => !p.started);
  }

  private spawn(): ExecutorProcess {
    return new ExecutorProcess(this.opts.limits, (dead) => this.guard(() => this.replace(dead)), this.opts.onChange);
  }

  private replace(dead: ExecutorProcess): void {
    const i = this.all.indexOf(dead);
    if (i === -1 || this.closing) return; // retired on purpose, or closing
    this.opts.onRestart(dead.pid, dead.replacedFor);
    this.all.splice(i, 1);
    this.opts.passes.drop(dead);
    const now = performance.now();
    // One that died young may not be able to start at all: replace it after a pause, not in a tight loop.
    if (now - dead.spawnedAt < 1000) this.spawnAfter = now + RESPAWN_PAUSE_MS;
    this.grow(now);
  }

  /** Processes to keep free: one more while a repo may go beyond its share on its runaway pass (Placement.allowed). */
  private keepFree(): number {
    return this.opts.processes + (this.opts.passes.beyondShare ? 1 : 0);
  }

  /** Below the process limit: a process running a statement with a runaway pass is room beyond it (runaways.ts). */
  private belowLimit(): boolean {
    return this.all.length - this.opts.passes.size < this.opts.maxProcesses;
  }

  /** Keeps `processes` processes free, spawning extra ones (up to `maxProcesses`); closes extras no longer needed. */
  maintain(now: number): void {
    this.grow(now);
    this.shrink(now);
  }

  private grow(now: number): void {
    if (this.closing || now < this.spawnAfter) return;
    let free = this.general(now).length;
    let spawned = false;
    while (free < this.keepFree() && this.belowLimit()) {
      try {
        this.all.push(this.spawn());
      } catch (e) {
        this.opts.onError(e); // e.g. EAGAIN, EMFILE: tried again after a pause, not at every 10-ms tick
        this.spawnAfter = now + RESPAWN_PAUSE_MS;
        break;
      }
      free++;
      spawned = true;
    }
    if (spawned) this.opts.onChange();
  }

  /** Closes a retired process once idle, or an extra one idle for a while when enough others are free. */
  private shrink(now: number): void {
    const idle = (p: ExecutorProcess) => p.alive && !p.closing && p.inflight === 0 && p.pins === 0;
    let gone = this.all.find((p) => p.retire && idle(p));
    if (!gone && this.all.length > this.opts.processes && this.general(now).length > this.keepFree()) {
      gone = this.all.find((p) => idle(p) && now - p.idleSince > RETIRE_IDLE_MS);
    }
    if (!gone) return;
    this.all.splice(this.all.indexOf(gone), 1);
    const closed = gone.close().catch(() => {});
    this.retiring.add(closed);
    void closed.finally(() => this.retiring.delete(closed));
    this.grow(now);
  }

  /**
   * The process an interactive transaction of repo `tenant` will run on, kept until `unpin`. A statement past its
   * time limit is stopped by killing its process, and every transaction there dies with it: so a repo's transactions
   * go to a process of their own that no other repo's work goes to (Placement.allowed), one it already holds or a
   * spare one. Without a spare (`processes` must stay open to all, and no more may be spawned) it shares the least
   * held one, which is then open to all again.
   */
  pin(tenant: string): ExecutorProcess | undefined {
    const now = performance.now();
    const free = this.free(now);
    const least = (ps: ExecutorProcess[]) => ps.reduce<ExecutorProcess | undefined>((a, b) => (!a || b.inflight < a.inflight ? b : a), undefined);
    let best = least(free.filter((p) => p.pinnedBy.has(tenant) && p.pinnedBy.size === 1 && !p.shared));
    const open = free.filter((p) => p.pinnedBy.size === 0);
    // One of its own only while `processes` stay open to every repo after it (or one more may be spawned for them).
    const spare = this.general(now).length > this.opts.processes || this.belowLimit();
    if (!best && open.length > 0 && spare) best = least(open);
    if (!best) {
      // No spare: it shares the least held process, which is (or stays) open to all. Taken exclusively here, six
      // repos with a transaction each left no process to any other repo (attack round 2, 2026-11-26).
      best = free.reduce<ExecutorProcess | undefined>((a, b) => (!a || b.pinnedBy.size < a.pinnedBy.size || (b.pinnedBy.size === a.pinnedBy.size && b.inflight < a.inflight) ? b : a), undefined);
      if (best) best.shared = true;
    }
    if (!best) return undefined;
    best.pins++;
    best.pinnedBy.set(tenant, (best.pinnedBy.get(tenant) ?? 0) + 1);
    this.grow(now); // a process taken out of general use is replaced while a spare may be spawned
    return best;
  }

  unpin(p: ExecutorProcess, tenant: string): void {
    p.pins = Math.max(0, p.pins - 1);
    const left = (p.pinnedBy.get(tenant) ?? 1) - 1;
    if (left > 0) p.pinnedBy.set(tenant, left);
    else p.pinnedBy.delete(tenant);
    if (p.pinnedBy.size === 0) p.shared = false;
  }

  /** Sends one message to every live process (e.g. to forget a database): never a job, never hedged. */
  broadcast(header: object, budgetMs: number): Promise<unknown> {
    // A retiring process takes no message but still holds its connections until its `close`: waited for too, so
    // after a `forget` no process holds the file (a cluster follower then renames a snapshot over it).
    return Promise.all([...this.all.map((p) => p.send(header, undefined, budgetMs).catch(() => undefined)), ...this.retiring]);
  }

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.all.map((p) => p.close()));
  }
}
