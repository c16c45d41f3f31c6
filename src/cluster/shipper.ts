// The primary's side of synchronous replication: after a commit, the database's new change-log events go to its
// follower, tagged with the epoch; a write's 200 waits for the follower's ack. One shipment per database at a time
// carries everything committed meanwhile (group commit across requests).
import { createReadStream, rmSync } from 'node:fs';
import { clearRestoredMark, readRestoredMark } from '../db/backup-restored.ts';
import { Pool } from 'undici';
import { ApiError } from '../shared/errors.ts';
import { StopBackoff } from '../shared/stop-backoff.ts';
import { PEER_POOL_CONNECTIONS } from '../shared/connection-cap.ts';
import type { Scope } from '../db/contract.ts';
import type { DbService } from '../db/service.ts';
import { scopeKey } from './placement.ts';

interface Waiter { version: number; resolve: () => void; reject: (e: unknown) => void }

interface Lane {
  scope: Scope;
  epoch: number;
  follower: string;
  url: string;
  /** The follower's version when known to share our history; null: ask it first. */
  acked: number | null;
  waiters: Waiter[];
  running: boolean;
  /** The mirror cursors last sent to this follower (JSON), so an unchanged set is not sent again. */
  cursorsSent: string;
}

/** The follower refused this epoch: a newer primary exists, this node must not answer 200 for the database again. */
export class Superseded extends Error {}

/**
 * The follower, brought in line by this node under this epoch, holds what this node's copy lacks: this node lost
 * writes it had shipped (its DATA_DIR restored from a backup, or DB_SYNC=normal after a power loss). Replacing the
 * follower's copy with a snapshot would lose acknowledged writes; this node must step down and let it take over.
 */
export class BehindFollower extends Error {}

/** The follower refused a request before running it (503 with Retry-After or `committed: false`): nothing of it applied. */
class Refused extends Error {
  readonly retryAfterMs: number;

  constructor(message: string, retryAfterMs: number) {
    super(message);
    this.retryAfterMs = retryAfterMs;
  }
}

/** What a follower's /_cluster/state answers: its copy, and whether it was brought in line under the epoch asked with. */
interface FollowerState { version: number; lastEventId: string | null; inLine?: boolean }

/** Where one database's shipments go: a lane, or a one-off question (retake). */
type Target = Pick<Lane, 'scope' | 'epoch' | 'url'>;

const MAX_EVENTS = 256;
/**
 * After an apply the follower stopped (past its time limit: the tenant's CHECK, generated or index expressions cost
 * that much), the database's shipments are snapshots for this long, doubled at each further stop up to the maximum
 * and forgotten at the next apply that succeeds (StopBackoff): stopping every apply would cost the follower an
 * executor each time.
 */
const SNAPSHOTS_FIRST_MS = 10_000;
const SNAPSHOTS_MAX_MS = 300_000;
/**
 * How long a write waits in all for a follower that refused its shipment for a passing reason (its executors busy, its
 * connection cap: Refused), trying again after each Retry-After: its caller then gets the 200 rather than 503 `committed: null`.
 */
const REFUSED_RETRY_MS = 2_000;

export class Shipper {
  private readonly lanes = new Map<string, Lane>();
  /** Databases whose shipments are snapshots for now (see SNAPSHOTS_FIRST_MS). */
  private readonly snapshotsOnly = new StopBackoff(SNAPSHOTS_FIRST_MS, SNAPSHOTS_MAX_MS);
  private readonly pools = new Map<string, Pool>();
  /** Databases with no restore mark (src/db/backup-restored.ts): no file to look for at each shipment. */
  private readonly unmarked = new Set<string>();
  /** Closing: a refused shipment is not tried again. */
  private closed = false;
  private readonly db: DbService;
  private readonly token: string;
  private readonly timeoutMs: number;
  private readonly onSuperseded: (scope: Scope) => void;
  private readonly onBehind: (scope: Scope, epoch: number) => void;
  private readonly cursors: ((scope: Scope) => Record<string, number>) | undefined;

  /** `cursors`: what each mirror acknowledged of a database here, shipped along so a follower that takes over resumes there. */
  constructor(opts: {
    db: DbService; token: string; timeoutMs: number; onSuperseded: (scope: Scope) => void; onBehind: (scope: Scope, epoch: number) => void;
    cursors?: (scope: Scope) => Record<string, number>;
  }) {
    this.db = opts.db;
    this.token = opts.token;
    this.timeoutMs = opts.timeoutMs;
    this.onSuperseded = opts.onSuperseded;
    this.onBehind = opts.onBehind;
    this.cursors = opts.cursors;
  }

  /** Resolves once `follower` holds `version` (or later) of the database under `epoch`. */
  ensure(scope: Scope, version: number, epoch: number, follower: string, url: string): Promise<void> {
    const key = scopeKey(scope);
    let lane = this.lanes.get(key);
    if (!lane || lane.epoch !== epoch || lane.follower !== follower) {
      // A new epoch or follower: a new lane; the old one finishes its own waiters (acked by the follower of their time).
      lane = { scope, epoch, follower, url, acked: null, waiters: [], running: false, cursorsSent: '{}' };
      this.lanes.set(key, lane);
    }
    if (lane.acked !== null && lane.acked >= version) return Promise.resolve();
    return new Promise((resolve, reject) => {
      lane.waiters.push({ version, resolve, reject });
      if (!lane.running) void this.run(lane);
    });
  }

  /**
   * Sends the follower the mirror cursors when they moved since the last shipment (a database without writes, a
   * move's handover): a follower that takes over then repeats less. Only to a follower in line; failures are left
   * to the next write (which carries them anyway).
   */
  async pushCursors(scope: Scope): Promise<void> {
    const lane = this.lanes.get(scopeKey(scope));
    const cursors = this.cursors?.(scope);
    if (!lane || !cursors || lane.running || lane.acked === null) return;
    const text = JSON.stringify(cursors);
    if (text === lane.cursorsSent) return;
    await this.post(lane, '/_cluster/cursors', { mirrors: cursors });
    lane.cursorsSent = text;
  }

  /** The follower may have forgotten what it held in memory (it restarted): ask it again before the next write. */
  resync(scope: Scope): void {
    const lane = this.lanes.get(scopeKey(scope));
    if (lane) lane.acked = null;
  }

  private async run(lane: Lane): Promise<void> {
    lane.running = true;
    let refusedSince: number | null = null;
    while (lane.waiters.length > 0) {
      try {
        if (lane.acked === null) lane.acked = await this.handshake(lane);
        const target = Math.max(...lane.waiters.map((w) => w.version));
        while (lane.acked < target) lane.acked = await this.shipOnce(lane);
        this.followerHolds(lane);
        const done = lane.waiters.filter((w) => w.version <= lane.acked!);
        lane.waiters = lane.waiters.filter((w) => w.version > lane.acked!);
        for (const w of done) w.resolve();
        refusedSince = null;
      } catch (e) {
        // Nothing applied (lane.acked still holds): the same shipment again once the follower said to, within the bound.
        if (e instanceof Refused && await this.retryRefused(e, (refusedSince ??= performance.now()))) continue;
        refusedSince = null;
        lane.acked = null;
        const waiters = lane.waiters;
        lane.waiters = [];
        const error = e instanceof Superseded
          ? new ApiError('unavailable', 'this write committed on a node that is no longer the database\'s primary and is not kept: read the data back from the new primary', { committed: false }, { 'retry-after': '1' })
          : e instanceof BehindFollower
            ? new ApiError('unavailable', 'this node\'s copy of the database is older than its follower\'s (its DATA_DIR was restored from a backup, or lost writes): it stopped serving the database, the follower takes over; this write is not kept', { committed: false }, { 'retry-after': '1' })
            : new ApiError('unavailable', `the write committed on the primary but its follower did not confirm it (${reason(e)}); whether it survives a failover is unknown: read the data back`, { committed: null }, { 'retry-after': '1' });
        for (const w of waiters) w.reject(error);
        // Its waiters answered and the lane let go first: a throw below (a stray rejection, logged) leaves no write waiting for ever.
        lane.running = false;
        if (e instanceof Superseded) this.onSuperseded(lane.scope);
        if (e instanceof BehindFollower) this.onBehind(lane.scope, lane.epoch);
        return;
      }
    }
    lane.running = false;
  }

  /** Waits the follower's Retry-After, cut to what is left of REFUSED_RETRY_MS since the first refusal; false: none left. */
  private async retryRefused(e: Refused, since: number): Promise<boolean> {
    const left = REFUSED_RETRY_MS - (performance.now() - since);
    if (left < 100 || this.closed) return false;
    await new Promise((resolve) => setTimeout(resolve, Math.max(100, Math.min(e.retryAfterMs, left)))); // a Retry-After of 0: not a loop of requests
    return !this.closed;
  }

  /**
   * Where the follower's copy stands: continued from if its newest event is ours, else replaced by a snapshot —
   * unless this node brought it in line under this epoch and lacks that event (BehindFollower).
   */
  private async handshake(lane: Lane): Promise<number> {
    const state = await this.post(lane, '/_cluster/state', {}) as FollowerState;
    if (state.version > 0 && state.lastEventId !== null) {
      const ours = await this.db.readChanges(lane.scope, state.version - 1, 1).catch(() => null);
      const event = ours?.events[0];
      if (event && event.version === state.version && event.id === state.lastEventId) {
        const confirmed = await this.post(lane, '/_cluster/confirm', { version: state.version }) as { problem?: string };
        if (confirmed.problem === undefined) return state.version;
      } else if (state.inLine === true) {
        // Everything it holds came from this node under this epoch, after this node's COMMIT: another event at its
        // version, or no such version here, means this copy lost what was shipped (and maybe acknowledged).
        const version = ours?.version ?? (await this.db.currentVersion(lane.scope).catch(() => null)) ?? 0;
        if (version < state.version || event?.version === state.version) {
          throw new BehindFollower(`the follower holds version ${state.version}, which this copy (at ${version}) lacks or holds otherwise`);
        }
      } else if (await this.restoredBelow(lane.scope, state.version)) {
        // Not in line, but its copy goes past the backup this copy was restored from, on another history: the versions
        // the backup lost (maybe acknowledged). It gets the database (confirmed in line) rather than this copy.
        const confirmed = await this.post(lane, '/_cluster/confirm', { version: state.version }) as { problem?: string };
        if (confirmed.problem !== undefined) throw new Error('the follower\'s copy moved while it was being compared; asked again');
        throw new BehindFollower(`the follower holds version ${state.version} of the history this copy's backup lost`);
      }
    }
    return this.sendSnapshot(lane);
  }

  /**
   * Whether this copy was restored from a backup (`scopebase restore`) at or below `version`, and no follower has held
   * its restore event since: a copy at `version` that is not of this history then holds what the backup lost.
   */
  private async restoredBelow(scope: Scope, version: number): Promise<boolean> {
    const path = this.db.databasePath(scope);
    const mark = readRestoredMark(path);
    if (mark === null || mark.version > version) return false;
    // A failed read throws (this handshake is tried again); only a log that no longer holds the event drops the mark.
    const ours = (await this.db.readChanges(scope, mark.version - 1, 1).catch((e: unknown) => {
      if (e instanceof ApiError && e.code === 'gone') return null;
      throw e;
    }))?.events[0];
    if (ours === undefined || ours.version !== mark.version || ours.id !== mark.eventId) {
      clearRestoredMark(path); // not this file's history any more (replaced, created again): nothing to hold back
      return false;
    }
    return true;
  }

  /** A follower acknowledged `acked` of this node's history: once that holds the restore event, the mark has done its work. */
  private followerHolds(lane: Lane): void {
    const key = scopeKey(lane.scope);
    if (this.unmarked.has(key)) return;
    const path = this.db.databasePath(lane.scope);
    const mark = readRestoredMark(path);
    if (mark !== null && lane.acked! < mark.version) return;
    if (mark !== null) clearRestoredMark(path);
    this.unmarked.add(key); // marks are written only by a restore, with this node stopped
  }

  /**
   * Whether `url`'s copy was brought in line under `epoch` (then it may take the database over itself, with every
   * write acknowledged under that epoch). Throws when it does not answer; Superseded when it knows a newer epoch.
   */
  async followerInLine(scope: Scope, epoch: number, url: string): Promise<boolean> {
    const state = await this.post({ scope, epoch, url }, '/_cluster/state', {}) as FollowerState;
    return state.inLine === true;
  }

  private async shipOnce(lane: Lane): Promise<number> {
    const key = scopeKey(lane.scope);
    if (this.snapshotsOnly.remaining(key) > 0) return this.sendSnapshot(lane);
    // The events up to the first without a changeset, as the executor wrote their text: never parsed on this event loop.
    let shipment: Buffer | null;
    try {
      shipment = await this.db.readShipment(lane.scope, lane.acked!, MAX_EVENTS);
    } catch {
      return this.sendSnapshot(lane); // past retention, or unreadable: the whole copy travels
    }
    if (shipment === null) return this.sendSnapshot(lane);
    const res = await this.post(lane, '/_cluster/apply', shipment, this.cursorsQuery(lane)) as { version?: number; problem?: string; stopped?: boolean };
    if (res.problem !== undefined) {
      if (res.stopped === true) this.snapshotsOnly.penalize(key);
      return this.sendSnapshot(lane);
    }
    this.snapshotsOnly.clear(key);
    return res.version!;
  }

  private async sendSnapshot(lane: Lane): Promise<number> {
    const { path } = await this.db.snapshotFile(lane.scope);
    try {
      const res = await this.pool(lane.url).request({
        method: 'POST', path: `/_cluster/snapshot?${this.query(lane)}${this.cursorsQuery(lane)}`, body: createReadStream(path),
        headers: { 'x-scopebase-proxy-token': this.token, 'content-type': 'application/vnd.sqlite3' }, signal: AbortSignal.timeout(Math.max(this.timeoutMs, 60_000)),
      });
      return ((await this.answer(res.statusCode, await res.body.text(), res.headers['retry-after'])) as { version: number }).version;
    } finally {
      rmSync(path, { force: true });
    }
  }

  private query(lane: Target): string {
    return new URLSearchParams({ org: lane.scope.org, repo: lane.scope.repo, database: lane.scope.database, epoch: String(lane.epoch) }).toString();
  }

  /** Mirror cursors travel in the query of an apply or a snapshot (a database with triggers only ever travels so). */
  private cursorsQuery(lane: Lane): string {
    const cursors = this.cursors?.(lane.scope);
    if (cursors) lane.cursorsSent = JSON.stringify(cursors);
    return cursors && Object.keys(cursors).length > 0 ? `&mirrors=${encodeURIComponent(JSON.stringify(cursors))}` : '';
  }

  private async post(lane: Target, path: string, body: object | Buffer, extraQuery = ''): Promise<unknown> {
    const res = await this.pool(lane.url).request({
      method: 'POST', path: `${path}?${this.query(lane)}${extraQuery}`, body: Buffer.isBuffer(body) ? body : JSON.stringify(body),
      headers: { 'x-scopebase-proxy-token': this.token, 'content-type': 'application/json' }, signal: AbortSignal.timeout(this.timeoutMs),
    });
    return this.answer(res.statusCode, await res.body.text(), res.headers['retry-after']);
  }

  private answer(status: number, text: string, retryAfter: string | string[] | undefined): unknown {
    if (status === 410) throw new Superseded(text.slice(0, 200));
    if (status !== 200) {
      let error: { code?: string; details?: { committed?: unknown } } | undefined;
      try {
        error = (JSON.parse(text) as { error?: typeof error }).error;
      } catch { /* not ours */ }
      const said = `follower answered ${status}${error?.code === undefined ? '' : ` ${error.code}`}`; // the code only: a message may name the follower's paths
      const committed = error?.details?.committed;
      // A 503 that ran nothing: `committed: false`, or Retry-After with no word of a commit (a connection cap, a shutdown).
      if (status === 503 && (committed === false || (committed === undefined && retryAfter !== undefined))) {
        const seconds = Number(Array.isArray(retryAfter) ? retryAfter[0] : retryAfter);
        throw new Refused(`${said}, still after ${REFUSED_RETRY_MS} ms of retries`, Number.isFinite(seconds) && seconds >= 0 ? seconds * 1000 : 1000);
      }
      throw new Error(said);
    }
    return JSON.parse(text);
  }

  private pool(url: string): Pool {
    let pool = this.pools.get(url);
    if (!pool) this.pools.set(url, (pool = new Pool(url, { connections: PEER_POOL_CONNECTIONS })));
    return pool;
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.pools.values()].map((p) => p.close()));
  }
}

/** Why a shipment failed, for the client: a code, never an address or a path. */
function reason(e: unknown): string {
  if (e instanceof ApiError) return e.code;
  if (typeof e !== 'object' || e === null) return String(e).slice(0, 120); // a rejection with no error: reading `.code` threw
  const err = e as { code?: unknown; name?: string; message?: string };
  if (typeof err.code === 'string') return err.code;
  if (err.name === 'TimeoutError' || err.name === 'AbortError') return 'the follower did not answer in time';
  return (err.message ?? String(e)).slice(0, 120); // our own messages (follower answered …)
}
