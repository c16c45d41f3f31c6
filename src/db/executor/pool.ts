// The executor pool: reads go to the least busy process; writes to one database go through its lane, one group
// at a time, so writes are serialized without SQLITE_BUSY and concurrent requests share one commit.
import { randomBytes } from 'node:crypto';
import type { ExecutorLimits } from './handles.ts';
import { LostError, type ExecutorProcess } from './process.ts';
import { maxWait, Scheduler, waitedTooLong } from './scheduler.ts';
import { lostToApiError, overloaded, tenantOfPath } from './pool-errors.ts';
import type { Scope } from '../contract.ts';
import { ApiError } from '../../shared/errors.ts';

export interface ExecReply {
  status: number;
  body: Buffer;
  /** Set when the request changed the database: its new version. */
  version?: number;
}

export interface PoolOptions {
  processes: number;
  limits: ExecutorLimits;
  timeoutMs: number;
  /** Fairness and shedding (src/db/DESIGN.md, "Scheduling"); defaults for embedded pools such as the reference mirror's. */
  perTenant?: number;
  maxProcesses?: number;
  queueTimeoutMs?: number;
  queueTargetMs?: number;
  maxQueuedPerTenant?: number;
  maxQueued?: number;
  /** Called before a write creates a database file; throws (quota) to refuse. Returns a release callback. */
  beforeCreate(scope: Scope, path: string): (() => void) | null;
  /** Lowest version every mirror acknowledged, for change-log retention. */
  floor(scope: Scope): number | null;
  onCommit(scope: Scope, version: number): void;
  onRestart(pid: number | undefined, reason: string): void;
  /** An error caught in a timer or event of the pool, which must never stop the process. */
  onError?(e: unknown): void;
}

/** A follower's or a mirror's op on its copy (applyToCopy, applyToReplica, openReplica): a version, or why not. */
export type CopyOutcome = { version: number } | { problem: string; stopped?: true };

/** Writes that go through a database's lane; only executes are grouped. */
export type WriteOp = 'execute' | 'migrate' | 'restore' | 'import';

interface WriteItem {
  op: WriteOp | 'hold';
  body: Buffer;
  /** When it reached the lane: its wait for an executor counts from here. */
  at: number;
  resolve: (r: ExecReply) => void;
  reject: (e: unknown) => void;
  /** For a hold: hands over the held lane. */
  held?: (hold: LaneHold) => void;
  /** Already run once more after its process died under it without committing it. */
  retried?: boolean;
}

/**
 * A database's write lane held by an interactive transaction: later writes to the database wait behind it, and
 * its messages all run on one executor process (the transaction lives on a connection there).
 */
export interface LaneHold {
  /** The database file does not exist yet: the transaction may create it (the quota was checked). */
  readonly create: boolean;
  /** Runs one message on the transaction's process; a reply with `v` in its header committed that version. */
  run(header: Record<string, unknown>, body?: Buffer, budgetMs?: number): Promise<ExecReply>;
  /** Lets the writes behind it go; call it exactly when the transaction ended (committed, rolled back, or lost). */
  release(): void;
}

interface Lane {
  scope: Scope;
  busy: boolean;
  queue: WriteItem[];
  /** When its queue was last empty (each group takes all it can): see maxWait. */
  lastEmptyAt: number;
  /** Since when an interactive transaction holds it, or null. */
  heldSince: number | null;
}

const MAX_GROUP = 256;
const MAX_GROUP_BYTES = 8 * 1024 * 1024;

export class ExecutorPool {
  private readonly scheduler: Scheduler;
  private readonly lanes = new Map<string, Lane>();
  private readonly opts: PoolOptions;

  private readonly maxLane: number;
  private readonly timeoutMs: number;
  private readonly targetMs: number;

  constructor(opts: PoolOptions) {
    this.opts = opts;
    const maxQueuedPerTenant = opts.maxQueuedPerTenant ?? 1024;
    this.maxLane = maxQueuedPerTenant;
    this.timeoutMs = opts.queueTimeoutMs ?? 2000;
    this.targetMs = opts.queueTargetMs ?? 50;
    this.scheduler = new Scheduler({
      processes: opts.processes,
      maxProcesses: Math.max(opts.processes, opts.maxProcesses ?? opts.processes * 2 + 2),
      limits: opts.limits,
      perTenant: Math.min(opts.processes, opts.perTenant ?? opts.processes),
      queueTimeoutMs: this.timeoutMs,
      queueTargetMs: this.targetMs,
      maxQueuedPerTenant,
      maxQueued: opts.maxQueued ?? 8192,
      onRestart: (pid, stoppedFor) => opts.onRestart(pid, stoppedFor === 'temp_space' ? 'temporary files over DB_TEMP_MAX_BYTES' : 'stopped'),
      onError: (e) => opts.onError?.(e),
    });
  }

  /** Requests waiting for an executor. */
  get waiting(): number {
    return this.scheduler.waiting;
  }

  private get closing(): boolean {
    return this.scheduler.closing;
  }

  /**
   * A read-only operation (query, status, changes, snapshot). Its tenant, served in turn with the others, is the
   * database file's folder: its repo.
   */
  async read(header: Record<string, unknown>, body?: Buffer, budgetMs = this.opts.timeoutMs): Promise<ExecReply> {
    try {
      const frame = await this.scheduler.run(tenantOfPath(header.path), false, header, body, budgetMs);
      return { status: frame.header.s as number, body: frame.body };
    } catch (e) {
      throw lostToApiError(e, budgetMs);
    }
  }

  /** A write (execute or migrate) to one database, serialized with the other writes to it. */
  write(scope: Scope, path: string, op: WriteOp, body: Buffer): Promise<ExecReply> {
    return new Promise((resolve, reject) => this.enqueue(scope, path, { op, body, at: performance.now(), resolve, reject }));
  }

  /** Joins the database's lane: writes to one database run in arrival order, one group at a time. */
  private enqueue(scope: Scope, path: string, item: WriteItem): void {
    if (this.closing) return item.reject(new ApiError('unavailable', 'shutting down', undefined, { 'retry-after': '1' }));
    let lane = this.lanes.get(path);
    if (!lane) {
      lane = { scope, busy: false, queue: [], lastEmptyAt: performance.now(), heldSince: null };
      this.lanes.set(path, lane);
    }
    if (lane.queue.length >= this.maxLane) return item.reject(overloaded(`${this.maxLane} writes to this database already wait`));
    lane.queue.push(item);
    if (lane.heldSince !== null) this.waitBehindHold(lane, item);
    if (!lane.busy) void this.flush(path, lane);
  }

  /** A write behind an open interactive transaction waits DB_QUEUE_TIMEOUT_MS at most, and is told why it waited. */
  private waitBehindHold(lane: Lane, item: WriteItem): void {
    if (item.op === 'hold') return; // a BEGIN waits its turn: TxQuota and the transaction limits bound it
    setTimeout(() => {
      const at = lane.queue.indexOf(item);
      if (at === -1 || lane.heldSince === null) return;
      lane.queue.splice(at, 1);
      const open = Math.round(performance.now() - lane.heldSince);
      item.reject(new ApiError('unavailable', `this database's writes wait behind an interactive transaction (a libSQL stream) open for ${open} ms; this write waited ${this.timeoutMs} ms (DB_QUEUE_TIMEOUT_MS) and did not start: retry after a second (an idle transaction is rolled back after DB_STREAM_IDLE_MS, any after DB_TRANSACTION_MAX_MS)`, { committed: false }, { 'retry-after': '1' }));
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
    await new Promise<void>((ended) => item.held!(this.pinned(lane.scope, path, proc, created, ended)));
  }

  /**
   * A read-only interactive transaction (`BEGIN TRANSACTION READONLY`): a snapshot on one process, which holds no
   * lane (SPEC 4.10: only a write transaction holds its database's writes); of a missing database, an empty one.
   */
  async pinReader(scope: Scope, path: string): Promise<LaneHold> {
    const proc = this.scheduler.pin(tenantOfPath(path));
    if (!proc) throw overloaded('no executor process is running');
    return this.pinned(scope, path, proc, null, () => {});
  }

  /** The transaction's handle: its messages all go to `proc`; `release` unpins it (and lets its lane go: `ended`). */
  private pinned(scope: Scope, path: string, proc: ExecutorProcess, created: (() => void) | null, ended: () => void): LaneHold {
    const tenant = tenantOfPath(path);
    // What every message of the transaction carries: where, whose, and the token a lost commit is probed by.
    const common = { path, scope, create: created !== null, floor: this.opts.floor(scope), token: randomBytes(12).toString('base64url') };
    let released = false;
    return {
      create: created !== null,
      run: async (header, body, budgetMs = this.opts.timeoutMs) => {
        if (released) throw new ApiError('invalid_request', 'this transaction has ended');
        try {
          const frame = await this.scheduler.runOn(proc, tenant, { ...header, ...common }, body, budgetMs);
          const version = frame.header.v as number | undefined;
          if (version !== undefined) this.opts.onCommit(scope, version);
          return { status: frame.header.s as number, body: frame.body, version };
        } catch (e) {
          if (header.op === 'tx.commit' && e instanceof LostError && e.reason !== 'unstarted') throw await this.lostCommit(path, common.token, common.create);
          // The transaction died with its process. One that was creating its database leaves none (the probe
          // removes it at version 0), as a first write killed before its commit does; the lane is still held here.
          if (e instanceof LostError && common.create) await this.probe(path, common.token, true).catch(() => null);
          throw lostToApiError(e, budgetMs);
        }
      },
      release: () => {
        if (released) return;
        released = true;
        this.scheduler.unpin(proc, tenant);
        created?.();
        ended();
      },
    };
  }

  /**
   * After a lost reply: did the write with this token commit? `created`: it was creating its database, which the
   * executor removes when nothing of it committed (still at version 0, or killed before its internal tables).
   * A probe lost in turn (its process killed too, as when every executor is; or stopped on a starved machine) is
   * sent again, twice at most: it only reads, and removes only what nothing committed to.
   */
  private async probe(path: string, token: string, created: boolean): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        const probe = await this.scheduler.run(tenantOfPath(path), true, { op: 'probe', path, token, created }, undefined, this.opts.timeoutMs);
        return probe.header.committed === true;
      } catch (e) {
        if (!(e instanceof LostError) || e.reason === 'unstarted' || this.closing || attempt >= 3) throw e;
      }
    }
  }

  /** The process died during a transaction's COMMIT: did it commit? (SQLite's journal makes it all or nothing.) */
  private async lostCommit(path: string, token: string, created: boolean): Promise<ApiError> {
    let committed: boolean | null;
    try {
      committed = await this.probe(path, token, created);
    } catch {
      committed = null;
    }
    const what = committed === null ? 'whether it committed is unknown: read the data back' : committed ? 'it committed' : 'nothing of it was applied';
    return new ApiError('unavailable', `the executor stopped during this transaction's commit; ${what}`, { committed }, { 'retry-after': '1' });
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
    while (lane.queue.length > 0) {
      // Writes that waited past their allowance behind earlier groups are refused, not run late.
      const now = performance.now();
      const cutoff = now - maxWait(lane.lastEmptyAt, now, this.timeoutMs, this.targetMs);
      while (lane.queue.length > 0 && lane.queue[0]!.at < cutoff && lane.queue[0]!.op !== 'hold') {
        const it = lane.queue.shift()!;
        it.reject(lostToApiError(waitedTooLong(now - it.at), 0));
      }
      if (lane.queue.length === 0) break;
      const items = this.take(lane);
      if (lane.queue.length === 0) lane.lastEmptyAt = now;
      const startedAt = performance.now();
      if (items[0]!.op === 'hold') {
        lane.heldSince = performance.now();
        for (const waiting of lane.queue) this.waitBehindHold(lane, waiting);
        await this.hold(path, lane, items[0]!);
        lane.heldSince = null;
        lane.lastEmptyAt = performance.now(); // the wait behind a transaction is not overload: DB_QUEUE_TIMEOUT_MS bounds it
      }
      else await this.runGroup(path, lane, items, items.length > 1);
      // Every write still here waited for this group, its database's earlier write, which SPEC 4.8 serializes it
      // behind (bounded by its time limit), not for an executor: that time is not held against its allowance. (Only
      // those that came during the group were credited: one queued behind two groups was refused after the second.)
      const end = performance.now();
      for (const it of lane.queue) it.at += end - Math.max(it.at, startedAt);
    }
    lane.busy = false;
    this.lanes.delete(path);
  }

  private async runGroup(path: string, lane: Lane, items: WriteItem[], splittable: boolean): Promise<void> {
    let release: (() => void) | null = null;
    try {
      release = this.opts.beforeCreate(lane.scope, path);
    } catch (e) {
      for (const it of items) it.reject(e);
      return;
    }
    const token = randomBytes(12).toString('base64url');
    const header = {
      op: items[0]!.op, path, create: release !== null, scope: lane.scope, floor: this.opts.floor(lane.scope), token,
      lens: items.map((it) => it.body.length),
    };
    // A restore or an import rebuilds or copies a whole database: given the time a snapshot is. Each statement of an
    // imported SQL text is held to the statement limit, as any statement (the executor restarts the clock for each).
    const budget = items[0]!.op === 'restore' || items[0]!.op === 'import' ? Math.max(this.opts.timeoutMs, 600_000) : this.opts.timeoutMs;
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
      // A change no changeset can carry ended the group early: the rest go first in the next one.
      if (replies.length < items.length) {
        const rest = items.slice(replies.length);
        for (const it of rest) it.at = performance.now(); // they waited for their own group, not for an executor
        lane.queue.unshift(...rest);
      }
    } catch (e) {
      await this.recover(path, lane, items, splittable, token, e, release !== null);
    } finally {
      release?.();
    }
  }

  /** A group got no reply. If it committed, say so; else rerun its requests one by one to find the runaway. */
  private async recover(path: string, lane: Lane, items: WriteItem[], splittable: boolean, token: string, e: unknown, created: boolean): Promise<void> {
    if (!(e instanceof LostError) || this.closing) {
      for (const it of items) it.reject(lostToApiError(e, this.opts.timeoutMs));
      return;
    }
    let committed: boolean | null;
    try {
      committed = await this.probe(path, token, created);
    } catch {
      committed = null; // the probe failed too: rerunning could apply the writes twice, so nothing reruns
    }
    if (committed !== false) {
      const message = committed
        ? 'the executor stopped after this write committed, and its reply was lost: read the data back before retrying'
        : 'the executor stopped and whether this write committed is unknown: read the data back before retrying';
      for (const it of items) it.reject(new ApiError('unavailable', message, { committed }, { 'retry-after': '1' }));
      return;
    }
    if (splittable) {
      for (const it of items) await this.runGroup(path, lane, [it], false);
      return;
    }
    // Not committed, and its process died under it, not at its time limit (killed from outside, out of memory):
    // it runs once more, as a lost read does; a second loss is reported (it may be the request's own doing).
    if (items.length === 1 && e.reason === 'crash' && !items[0]!.retried) {
      items[0]!.retried = true;
      await this.runGroup(path, lane, items, false);
      return;
    }
    for (const it of items) it.reject(lostToApiError(e, this.opts.timeoutMs));
  }

  /**
   * A cluster follower's apply of the primary's events (`body`: a JSON object with `events`) to its copy at `path`,
   * in one transaction, on an executor process as a write of the database's repo: the changesets run the tenant's
   * CHECK constraints, generated columns and index expressions, which a kill at `budgetMs` stops (nothing of it
   * stays: SQLite's journal). Resolves with the copy's new version or why it was not applied; `stopped` when its
   * executor was stopped under it (its time limit, its temporary files) or died (what the tenant's expressions can
   * cause: the primary then ships snapshots for a while rather than have every apply stopped). Rejects (an ApiError,
   * 503) only when it could not start (overloaded, shutting down).
   */
  applyToCopy(path: string, body: Buffer, budgetMs: number): Promise<CopyOutcome> {
    return this.onCopy({ op: 'apply', path }, body, budgetMs, 'applying the events');
  }

  /**
   * A reference mirror's apply of one event (`body`: the event's JSON) to its replica at `path`, in one transaction:
   * as applyToCopy, a write of the replica's repo on an executor, stopped at `budgetMs` (the mirror then
   * re-bootstraps the replica from a snapshot). Never on the mirror's event loop: it serves every org's replicas.
   */
  applyToReplica(path: string, body: Buffer, budgetMs: number): Promise<CopyOutcome> {
    return this.onCopy({ op: 'replica.apply', path }, body, budgetMs, 'applying the event');
  }

  /**
   * A snapshot the reference mirror downloaded to `path`, made a replica (its triggers dropped, WAL on) before it is
   * renamed into place; or, `prepare` false, an existing replica's version. Either parses the tenant's schema, which
   * the tenant sizes: on an executor, under `budgetMs`, like an apply.
   */
  openReplica(path: string, prepare: boolean, budgetMs: number): Promise<CopyOutcome> {
    return this.onCopy({ op: prepare ? 'replica.prepare' : 'replica.version', path }, undefined, budgetMs, prepare ? 'preparing the snapshot' : 'reading the replica');
  }

  private async onCopy(header: { op: string; path: string }, body: Buffer | undefined, budgetMs: number, what: string): Promise<CopyOutcome> {
    let frame;
    try {
      frame = await this.scheduler.run(tenantOfPath(header.path), true, header, body, budgetMs);
    } catch (e) {
      if (!(e instanceof LostError) || e.reason === 'unstarted') throw lostToApiError(e, budgetMs);
      // Whether it committed is unknown (a kill after its COMMIT): a snapshot settles it.
      const why = e.reason === 'timeout' ? `ran past ${budgetMs} ms` : e.reason === 'temp_space' ? 'made too many temporary files' : 'lost its executor';
      return { problem: `${what} ${why} and was stopped`, stopped: true };
    }
    if (frame.header.s !== 200) return { problem: `${what} failed (${frame.header.s as number})` };
    return JSON.parse(frame.body.toString('utf8')) as CopyOutcome;
  }

  /** Every process, for broadcasting (e.g. forgetting a database). */
  async broadcast(header: object): Promise<void> {
    await this.scheduler.broadcast(header, this.opts.timeoutMs);
  }

  pids(): (number | undefined)[] {
    return this.scheduler.pids();
  }

  async close(): Promise<void> {
    // Let queued writes finish: a write that was accepted is answered.
    while ([...this.lanes.values()].some((l) => l.busy)) await new Promise((r) => setTimeout(r, 10));
    await this.scheduler.close();
  }
}
