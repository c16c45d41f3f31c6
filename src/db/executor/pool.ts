// Each request runs on an executor process under a time limit: reads on the least busy, writes via their lane.
import type { ExecutorLimits } from './handles.ts';
import { LostError } from './process.ts';
import { Scheduler } from './scheduler.ts';
import { lostToApiError, overloaded, tenantOfPath } from './pool-errors.ts';
import { pinTransaction, type LaneHold } from './pinned-transaction.ts';
import { WriteLanes, type WriteBudget, type WriteOp } from './write-lanes.ts';
import type { Scope } from '../contract.ts';
import { ApiError } from '../../shared/errors.ts';

export type { LaneHold } from './pinned-transaction.ts';
export type { WriteOp } from './write-lanes.ts';

/**
 * How long an executor waits for a lock another process holds on a database file (a backup tool, a `sqlite3` shell
 * in exclusive mode): half the statement limit, at most 10 s. Waited until the limit, the process was stopped and
 * the caller got 422 query_timeout though nothing ran; SQLITE_BUSY within it is 503 unavailable with Retry-After.
 */
function lockWaitMs(timeoutMs: number): number {
  return Math.min(10_000, Math.floor(timeoutMs / 2));
}

/** What the log says of a replaced executor: stopped on purpose (which limit), or gone by itself. */
const RESTART_REASONS = {
  timeout: 'stopped: a statement ran past its time limit (DB_QUERY_TIMEOUT_MS)',
  temp_space: 'stopped: temporary files over DB_TEMP_MAX_BYTES',
  memory: 'stopped: a statement\'s memory over DB_MEMORY_MAX_BYTES',
  exited: 'exited by itself (a crash, or killed from outside)',
  malformed: 'stopped: it sent a frame that cannot be read (a bug; its work in flight was handled as a crash\'s)',
} as const;

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
  /**
   * A version the background re-probe found committed (`probeLater`): no caller's reply carries it, so besides what
   * `onCommit` does it must be replicated as a 200's is (a cluster's follower). Defaults to `onCommit`.
   */
  onLateCommit?(scope: Scope, version: number): void;
  onRestart(pid: number | undefined, reason: string): void;
  /** An error caught in a timer or event of the pool, which must never stop the process. */
  onError?(e: unknown): void;
}

/** A follower's or a mirror's op on its copy (applyToCopy, checkSnapshot, applyToReplica, openReplica): a version, or why not. */
export type CopyOutcome = { version: number } | { problem: string; stopped?: true };
/** A follower's copy as the primary's handshake asks it (copyState): version 0 when there is none; a mirror's replica. */
export type CopyState = { version: number; lastEventId: string | null } | { problem: string; stopped?: true };

export class ExecutorPool {
  private readonly scheduler: Scheduler;
  private readonly lanes: WriteLanes;
  private readonly opts: PoolOptions;

  constructor(opts: PoolOptions) {
    this.opts = opts;
    const maxQueuedPerTenant = opts.maxQueuedPerTenant ?? 1024;
    const timeoutMs = opts.queueTimeoutMs ?? 2000;
        this.scheduler = new Scheduler({
      processes: opts.processes,
      maxProcesses: Math.max(opts.processes, opts.maxProcesses ?? opts.processes * 2 + 2),
      limits: { ...opts.limits, busyTimeoutMs: lockWaitMs(opts.timeoutMs) },
      perTenant: Math.min(opts.processes, opts.perTenant ?? opts.processes),
      runawayPasses: opts.processes,
      queueTimeoutMs: timeoutMs,
      queueTargetMs: opts.queueTargetMs ?? 50,
      maxQueuedPerTenant,
      maxQueued: opts.maxQueued ?? 8192,
      onRestart: (pid, { stoppedFor, detail }) => opts.onRestart(pid, `${RESTART_REASONS[stoppedFor ?? 'exited']}${detail === undefined ? '' : `: ${detail}`}`),
      onError: (e) => opts.onError?.(e),
    });
    this.lanes = new WriteLanes(this.scheduler, opts, { maxLane: maxQueuedPerTenant, timeoutMs });
  }

  /** Requests waiting for an executor. */
  get waiting(): number {
    return this.scheduler.waiting;
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
  write(scope: Scope, path: string, op: WriteOp, body: Buffer, budget?: WriteBudget): Promise<ExecReply> {
    return this.lanes.write(scope, path, op, body, budget);
  }

  /** Background upkeep of a database's files on an executor, in its lane (WriteLanes.upkeep). */
  upkeep(scope: Scope, path: string, header: object): Promise<ExecReply> {
    return this.lanes.upkeep(scope, path, header);
  }

  /** Waits for the writes queued ahead, then holds the database's lane until `release()` (Hrana streams). */
  holdLane(scope: Scope, path: string): Promise<LaneHold> {
    return this.lanes.holdLane(scope, path);
  }

  /**
   * A read-only interactive transaction (`BEGIN TRANSACTION READONLY`): a snapshot on one process, which holds no
   * lane (SPEC 4.10: only a write transaction holds its database's writes); of a missing database, an empty one.
   */
  async pinReader(scope: Scope, path: string): Promise<LaneHold> {
    const proc = this.scheduler.pin(tenantOfPath(path));
    if (!proc) throw overloaded('no executor process is running');
    return pinTransaction(this.scheduler, this.opts, scope, path, proc, null, () => {});
  }

  /**
   * A cluster follower's apply of the primary's events (`body`: a JSON object with `events`, parsed only on the
   * executor) to its copy at `path`, in one transaction, on an executor process as a write of the database's repo: the
   * changesets run the tenant's CHECK constraints, generated columns and index expressions, which a kill at `budgetMs`
   * stops (nothing of it stays: SQLite's journal). Resolves with the copy's new version or why it was not applied;
   * `stopped` when its executor was stopped under it (its time limit, its temporary files) or died (what the tenant's
   * expressions can cause: the primary then ships snapshots for a while rather than have every apply stopped).
   * Rejects (an ApiError) only when it could not start (503: overloaded, shutting down) or `body` is no shipment (400).
   */
  applyToCopy(path: string, body: Buffer, budgetMs: number): Promise<CopyOutcome> {
    return this.onCopy({ op: 'apply', path }, body, budgetMs, 'applying the events');
  }

  /**
   * A cluster follower's copy at `path`: its version and newest event's id, for the primary's handshake. Opening it
   * parses the tenant's schema, which the tenant sizes: on an executor under `budgetMs`, as an apply.
   */
  copyState(path: string, budgetMs: number): Promise<CopyState> {
    return this.onCopy({ op: 'copy.state', path }, undefined, budgetMs, 'reading the copy') as Promise<CopyState>;
  }

  /**
   * A snapshot a cluster follower received into `file` for the copy at `path`: its version read and its WAL
   * checkpointed on an executor (opening it parses the tenant's schema), as a write of the copy's repo.
   */
  checkSnapshot(path: string, file: string, budgetMs: number): Promise<CopyOutcome> {
    return this.onCopy({ op: 'copy.check', path: file }, undefined, budgetMs, 'reading the snapshot', path);
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
   * renamed into place; or, `prepare` false, an existing replica's version. Either answers the id of the event that
   * made that version too, and parses the tenant's schema, which the tenant sizes: on an executor, under `budgetMs`.
   */
  openReplica(path: string, prepare: boolean, budgetMs: number): Promise<CopyState> {
    return this.onCopy({ op: prepare ? 'replica.prepare' : 'replica.version', path }, undefined, budgetMs, prepare ? 'preparing the snapshot' : 'reading the replica') as Promise<CopyState>;
  }

  /** `owner`: the database whose repo the op is counted to, when `header.path` is not its file (a received snapshot). */
  private async onCopy(header: { op: string; path: string }, body: Buffer | undefined, budgetMs: number, what: string, owner = header.path): Promise<CopyOutcome> {
    let frame;
    try {
      frame = await this.scheduler.run(tenantOfPath(owner), true, header, body, budgetMs);
    } catch (e) {
      if (!(e instanceof LostError) || e.reason === 'unstarted') throw lostToApiError(e, budgetMs);
      // Whether it committed is unknown (a kill after its COMMIT): a snapshot settles it.
      const why = e.reason === 'timeout' ? `ran past ${budgetMs} ms` : e.reason === 'temp_space' ? 'made too many temporary files' : e.reason === 'memory' ? 'took too much memory' : 'lost its executor';
      return { problem: `${what} ${why} and was stopped`, stopped: true };
    }
    // The caller's mistake (a body that is no shipment): nothing ran.
    if (frame.header.s === 400) throw new ApiError('invalid_request', (JSON.parse(frame.body.toString('utf8')) as { error: { message: string } }).error.message);
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
    await this.lanes.drained();
    await this.scheduler.close();
  }
}
