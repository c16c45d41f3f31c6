// A database's writes run in arrival order, one group (one commit) at a time, none past its allowance: no SQLITE_BUSY.
import { randomBytes } from 'node:crypto';
import { LostError } from './process.ts';
import type { Scheduler } from './scheduler.ts';
import { LostCommitError, lostToApiError, overloaded, tenantOfPath } from './pool-errors.ts';
import { probeLater, probeRequests, type LaneProbe, type Probed } from './commit-probe.ts';
import { pinTransaction, type LaneHold } from './pinned-transaction.ts';
import type { ExecReply, PoolOptions } from './pool.ts';
import type { Scope } from '../contract.ts';
import { MAX_CRASH_RERUNS } from './tenant.ts';
import { ApiError } from '../../shared/errors.ts';

/** Writes that go through a database's lane; only executes are grouped. */
export type WriteOp = 'execute' | 'migrate' | 'restore' | 'import';

interface WriteItem {
  op: WriteOp | 'hold' | 'probe' | 'upkeep';
  body: Buffer;
  /** When it reached the lane: its wait for an executor counts from here. */
  at: number;
  resolve: (r: ExecReply) => void;
  reject: (e: unknown) => void;
  /** For a hold: hands over the held lane. */
  held?: (hold: LaneHold) => void;
  /** For a background re-probe or upkeep: runs it (answering its caller, never resolve or reject). */
  task?: () => Promise<void>;
  /** Times it ran again after its process died under it without committing it. */
  crashes?: number;
  /** When its run began, kept through its reruns after a crash: they have what is left of its budget (its deadline). */
  firstRunAt?: number;
  /** Its own time budget (an import's, by its size), and the refusal when it runs past it. */
  budget?: WriteBudget;
}

export interface WriteBudget { ms: number; over: () => ApiError }

interface Lane {
  scope: Scope;
  busy: boolean;
  queue: WriteItem[];
  /** Since when an interactive transaction holds it, or null. */
  heldSince: number | null;
  /** Interactive transactions it has held: a wait armed behind one is not judged behind the next. */
  holds: number;
}

const MAX_GROUP = 256;
const MAX_GROUP_BYTES = 8 * 1024 * 1024;

/** How many writes a database's lane may hold, and how long one waits behind an interactive transaction. */
export interface LaneLimits {
  maxLane: number;
  timeoutMs: number;
}

export class WriteLanes {
  private readonly lanes = new Map<string, Lane>();
  /**
   * Databases a first write may have made at version 0, its reply and probe lost: the token its re-probe asks. Any
   * later write or transaction there forgets it (it used the file, which is then the database's); until then the
   * re-probe may remove the file, as the first probe would have.
   */
  private readonly unsettled = new Map<string, string>();
  private readonly scheduler: Scheduler;
  private readonly opts: PoolOptions;
  private readonly maxLane: number;
  private readonly timeoutMs: number;

  constructor(scheduler: Scheduler, opts: PoolOptions, limits: LaneLimits) {
    this.scheduler = scheduler;
    this.opts = opts;
    this.maxLane = limits.maxLane;
    this.timeoutMs = limits.timeoutMs;
  }

  private get closing(): boolean {
    return this.scheduler.closing;
  }

  /** A write (execute or migrate) to one database, serialized with the other writes to it. */
  write(scope: Scope, path: string, op: WriteOp, body: Buffer, budget?: WriteBudget): Promise<ExecReply> {
    return new Promise((resolve, reject) => this.enqueue(scope, path, { op, body, at: performance.now(), resolve, reject, budget }));
  }

  /** Joins the database's lane: writes to one database run in arrival order, one group at a time. */
  private enqueue(scope: Scope, path: string, item: WriteItem): void {
    if (this.closing) return item.reject(new ApiError('unavailable', 'shutting down', undefined, { 'retry-after': '1' }));
    let lane = this.lanes.get(path);
    if (!lane) {
      lane = { scope, busy: false, queue: [], heldSince: null, holds: 0 };
      this.lanes.set(path, lane);
    }
    if (lane.queue.length >= this.maxLane) return item.reject(overloaded(`${this.maxLane} writes to this database already wait`));
    lane.queue.push(item);
    if (lane.heldSince !== null) this.waitBehindHold(lane, item);
    if (!lane.busy) void this.flush(path, lane);
  }

  /**
   * A write behind an open interactive transaction waits DB_QUEUE_TIMEOUT_MS at most, and is told why it waited. So
   * does another transaction's BEGIN: it waited until the first ended (up to DB_TRANSACTION_MAX_MS, 30 s). Never
   * SQLITE_BUSY (SPEC 4.8): the 503 of every other wait, `UNAVAILABLE` on Hrana.
   */
  private waitBehindHold(lane: Lane, item: WriteItem): void {
    const hold = lane.holds;
    setTimeout(() => {
      const at = lane.queue.indexOf(item);
      // Ended meanwhile; or a later transaction holds the lane, behind which the wait was armed again (credited, below).
      if (at === -1 || lane.heldSince === null || lane.holds !== hold) return;
      lane.queue.splice(at, 1);
      const open = Math.round(performance.now() - lane.heldSince);
      const what = item.op === 'hold' ? 'this BEGIN' : 'this write';
      item.reject(new ApiError('unavailable', `this database's writes wait behind an interactive transaction (a libSQL stream) open for ${open} ms; ${what} waited ${this.timeoutMs} ms (DB_QUEUE_TIMEOUT_MS) and did not start: retry after a second (an idle transaction is rolled back after DB_STREAM_IDLE_MS, any after DB_TRANSACTION_MAX_MS)`, { committed: false }, { 'retry-after': '1' }));
    }, Math.max(0, item.at + this.timeoutMs - performance.now())).unref();
  }

  /** Waits for the writes queued ahead, then holds the database's lane until `release()` (Hrana streams). */
  holdLane(scope: Scope, path: string): Promise<LaneHold> {
    return new Promise((held, reject) => this.enqueue(scope, path, { op: 'hold', body: Buffer.alloc(0), at: performance.now(), resolve: () => {}, reject, held }));
  }

  private async hold(path: string, lane: Lane, item: WriteItem): Promise<void> {
    let created: (() => void) | null;
    try {
      created = this.opts.beforeCreate(lane.scope, path);
    } catch (e) {
      item.reject(e);
      return;
    }
    const proc = this.scheduler.pin(tenantOfPath(path));
    if (!proc) {
      created?.();
      item.reject(overloaded('no executor process is running'));
      return;
    }
    const inLane = (token: string, release: () => void) => this.probeInLane(lane.scope, path, token, release);
    await new Promise<void>((ended) => item.held!(pinTransaction(this.scheduler, this.opts, lane.scope, path, proc, created, ended, inLane)));
  }

  private take(lane: Lane): WriteItem[] {
    const first = lane.queue[0]!;
    if (first.op !== 'execute') return lane.queue.splice(0, 1);
    let n = 0;
    let bytes = 0;
    while (n < lane.queue.length && n < MAX_GROUP && lane.queue[n]!.op === 'execute' && (n === 0 || bytes + lane.queue[n]!.body.length <= MAX_GROUP_BYTES)) {
      bytes += lane.queue[n]!.body.length;
      n++;
    }
    return lane.queue.splice(0, n);
  }

  private async flush(path: string, lane: Lane): Promise<void> {
    lane.busy = true;
    // A write is refused only for waiting for an executor (the scheduler's DB_QUEUE_TIMEOUT_MS and target, counted
    // from `at`), never for waiting behind its database's earlier writes, which SPEC 4.8 serializes it behind.
    while (lane.queue.length > 0) {
      const items = this.take(lane);
      const startedAt = performance.now();
      try {
        await this.runItems(path, lane, items, startedAt);
      } catch (e) {
        // A bug (a callback of the pool's that threw): its requests are answered, and the lane goes on. Rejected out of
        // this unawaited loop, it left them unanswered and the lane busy for good: every later write there waited for ever.
        lane.heldSince = null;
        this.opts.onError?.(e);
        const fault = new ApiError('internal', 'an internal error stopped this write (the server logged it); whether it committed is unknown: read the data back before retrying', { committed: null });
        for (const it of items) it.reject(fault); // those already answered keep their answer
      }
      // Every write still here waited for this group (or transaction): that time is not held against its allowance.
      // (Only those that came during the group were credited: one queued behind two groups was refused after the second.)
      const end = performance.now();
      for (const it of lane.queue) it.at += end - Math.max(it.at, startedAt);
    }
    lane.busy = false;
    this.lanes.delete(path);
  }

  /** Runs what `take` took: a background task, an interactive transaction's hold, or a group of writes. */
  private async runItems(path: string, lane: Lane, items: WriteItem[], startedAt: number): Promise<void> {
    if (!items[0]!.task) this.unsettled.delete(path); // a re-probe or upkeep does not use the file as the database's
    if (items[0]!.task) return items[0]!.task();
    if (items[0]!.op !== 'hold') return this.runGroup(path, lane, items, items.length > 1);
    lane.heldSince = startedAt;
    lane.holds++;
    for (const waiting of lane.queue) this.waitBehindHold(lane, waiting);
    await this.hold(path, lane, items[0]!);
    lane.heldSince = null;
  }

  private async runGroup(path: string, lane: Lane, items: WriteItem[], splittable: boolean): Promise<void> {
    const floor = this.opts.floor(lane.scope); // before the creation is counted: a throw here leaves none to let go
    let release: (() => void) | null = null;
    try {
      release = this.opts.beforeCreate(lane.scope, path);
    } catch (e) {
      for (const it of items) it.reject(e);
      return;
    }
    const token = randomBytes(12).toString('base64url');
    const header = {
      op: items[0]!.op, path, create: release !== null, scope: lane.scope, floor, token,
      lens: items.map((it) => it.body.length),
    };
    const now = performance.now();
    for (const it of items) if (!it.crashes) it.firstRunAt = now; // a rerun after a crash keeps its deadline
    const budget = items[0]!.crashes ? this.timeLeft(items[0]!, now) : this.fullBudget(items[0]!);
    if (items[0]!.op === 'import') Object.assign(header, { statementMs: this.opts.timeoutMs, budgetMs: budget });
    try {
      const body = items.length === 1 ? items[0]!.body : Buffer.concat(items.map((it) => it.body));
      const frame = await this.scheduler.run(tenantOfPath(path), true, header, body, budget, items[0]!.at);
      // One reply for the whole group: the executor failed before running any of it (e.g. a damaged file).
      const whole = frame.header.items === undefined;
      const replies = whole ? items.map(() => ({ s: (frame.header.s as number | undefined) ?? 500, n: frame.body.length, v: undefined })) : frame.header.items as { s: number; v?: number; n: number }[];
      let off = 0;
      replies.forEach((r, i) => {
        const body = whole ? frame.body : frame.body.subarray(off, off + r.n);
        if (!whole) off += r.n;
        if (r.v !== undefined) this.opts.onCommit(lane.scope, r.v);
        items[i]!.resolve({ status: r.s, body, version: r.v });
      });
      // A change no changeset can carry ended the group early: the rest go first in the next one (credited its time).
      if (replies.length < items.length) lane.queue.unshift(...items.slice(replies.length));
    } catch (e) {
      if (await this.recover(path, lane, items, splittable, token, e, release)) release = null; // its re-probe lets it go
    } finally {
      release?.();
    }
  }

  /**
   * A group got no reply. Each request that committed is told so; the others rerun one by one, which finds the
   * runaway (a group may have committed part of its requests: some ran again alone under its token, write-ops.ts).
   */
  private async recover(path: string, lane: Lane, items: WriteItem[], splittable: boolean, token: string, e: unknown, release: (() => void) | null): Promise<boolean> {
    if (!(e instanceof LostError) || this.closing) {
      for (const it of items) it.reject(this.lostError(it, e));
      return false;
    }
    let probed: Probed | null;
    try {
      probed = await probeRequests(this.scheduler, this.opts.timeoutMs, path, token, release !== null);
    } catch {
      probed = null; // the probe failed too: rerunning could apply the writes twice, so nothing reruns
    }
    if (probed === null) {
      // What committed reaches mirrors and the follower when known. A write that was creating the database keeps its
      // creation until then: its re-probe runs in the lane and removes a file nothing committed to, as this one would have.
      const creating = release === null ? undefined : this.probeInLane(lane.scope, path, token, release);
      probeLater(this.scheduler, this.opts, lane.scope, path, token, items.length, creating);
      const message = 'the executor stopped and whether this write committed is unknown: read the data back before retrying';
      for (const it of items) it.reject(new ApiError('unavailable', message, { committed: null }, { 'retry-after': '1' }));
      return creating !== undefined;
    }
    const { committed, version } = probed;
    // What committed is reported as a 200's version is (mirrors, metrics), before the rest run again.
    if (items.some((_, i) => committed(i))) this.opts.onCommit(lane.scope, version);
    const message = 'the executor stopped after this write committed, and its reply was lost: read the data back before retrying';
    for (const [i, it] of items.entries()) if (committed(i)) it.reject(new LostCommitError(message, version));
    const rest = items.filter((_, i) => !committed(i));
    if (rest.length === 0) return false;
    if (splittable) {
      for (const it of rest) await this.runGroup(path, lane, [it], false);
      return false;
    }
    // Certainly not committed (the probe said so), and its process died under it, not at its own limits (killed from
    // outside, out of memory): it runs again while its deadline allows, MAX_CRASH_RERUNS times at most, as a lost
    // read does; past that the loss is reported (a statement that crashes its process itself takes one per run).
    const it = rest[0]!;
    if (rest.length === 1 && e.reason === 'crash' && (it.crashes ?? 0) < MAX_CRASH_RERUNS && this.timeLeft(it, performance.now()) > 0) {
      it.crashes = (it.crashes ?? 0) + 1;
      it.at = performance.now(); // it waits for an executor afresh: its first wait was long over
      await this.runGroup(path, lane, rest, false);
      return false;
    }
    for (const it of rest) it.reject(this.lostError(it, e));
    return false;
  }

  /**
   * The re-probe of a first write whose reply and probe were lost, each time through the database's lane: no write runs
   * beside it, and it is `created` (removes a file nothing committed to, still at version 0) while no later write or
   * transaction has used the file. `release` (the creation, counted toward the repo's databases) goes when it is over.
   */
  private probeInLane(scope: Scope, path: string, token: string, release: () => void): LaneProbe {
    this.unsettled.set(path, token);
    return {
      probe: () => new Promise<Probed>((answer, fail) => this.enqueue(scope, path, {
        op: 'probe', body: Buffer.alloc(0), at: performance.now(), resolve: () => {}, reject: fail,
        task: () => probeRequests(this.scheduler, this.opts.timeoutMs, path, token, this.unsettled.get(path) === token).then(answer, fail),
      })),
      done: () => {
        if (this.unsettled.get(path) === token) this.unsettled.delete(path);
        release();
      },
    };
  }

  /**
   * Background upkeep of a database's files (history/prune.ts): run on an executor as a write of its repo, in the
   * database's lane, so none of its writes or restores runs beside it. Resolves with the executor's reply, or rejects
   * when it could not run (refused by the scheduler, shutting down, its executor lost).
   */
  upkeep(scope: Scope, path: string, header: object): Promise<ExecReply> {
    return new Promise((resolve, reject) => this.enqueue(scope, path, {
      op: 'upkeep', body: Buffer.alloc(0), at: performance.now(), resolve: () => {}, reject,
      task: () => this.scheduler.run(tenantOfPath(path), true, { ...header, path }, undefined, this.opts.timeoutMs)
        .then((frame) => resolve({ status: frame.header.s as number, body: frame.body }), reject),
    }));
  }

  /**
   * The time a run of `it` has. A restore or an import rebuilds or copies a whole database: given the time a snapshot
   * is. Each statement of an imported SQL text is held to the statement limit, as any statement (the executor
   * restarts the clock for each).
   */
  private fullBudget(it: WriteItem): number {
    return it.budget?.ms ?? (it.op === 'restore' || it.op === 'import' ? Math.max(this.opts.timeoutMs, 600_000) : this.opts.timeoutMs);
  }

  /** What is left of `it`'s deadline: its budget from the run a crash first cut short. */
  private timeLeft(it: WriteItem, now: number): number {
    return Math.floor(it.firstRunAt! + this.fullBudget(it) - now);
  }

  /** A write stopped at its own budget (not at one statement's limit) is refused as that budget says. */
  private lostError(it: WriteItem, e: unknown): ApiError {
    if (it.budget && e instanceof LostError && e.reason === 'timeout' && !e.statement) return it.budget.over();
    return lostToApiError(e, this.opts.timeoutMs);
  }

  /** Resolves when no lane has a write left: a write that was accepted is answered. */
  async drained(): Promise<void> {
    while ([...this.lanes.values()].some((l) => l.busy)) await new Promise((r) => setTimeout(r, 10));
  }
}
