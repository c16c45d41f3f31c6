// Delivers every change event to every mirror: per (mirror, database) in version order, retried until acknowledged.
// Runs wherever it is given a feed, a logger and metrics: on the delivery thread in the product (thread.ts), in-process in tests.
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChangeEvent, ChangeFeed, MirrorReport, MirrorState, Scope } from '../../db/contract.ts';
import type { MirrorConfig } from '../../shared/config.ts';
import { ApiError } from '../../shared/errors.ts';
import { backoffDelay, type BackoffPolicy } from './backoff.ts';
import { Lane, scopeKey } from './lane.ts';
import { KeyedLimiter, Limiter } from './limiter.ts';
import { MirrorSender, type FailureKind, type Outcome } from './sender.ts';
import { DeliveryStore } from './store.ts';
import { scanDatabases } from './recovery.ts';

/** Events read from the change log per read: a turn sends at most one read's worth, then gives its delivery slot to the next waiting database (fairness). */
const READ_BATCH = 64;
/** Change-log reads in flight at once (each waits for an executor), and per org: an org whose reads are slow (its schema) holds at most its own. */
const READS = 16;
const READS_PER_ORG = 2;
/** Acknowledgements are saved once per turn, and at least this often during a slow turn (status shows saved ones). */
const SAVE_EVERY_MS = 100;
/** While the machine has no CPU to spare, delivery as a whole sends at most this many events a second (every lane still moves). */
const YIELD_EVENTS_PER_S = 200;

/** The log calls delivery makes (a pino logger fits; the delivery thread relays them to the main thread's logger). */
export interface DeliveryLog {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** What delivery counts (Prometheus in the main thread; counted and relayed from the delivery thread). */
export interface DeliveryMetrics {
  attempt(mirror: string): void;
  failure(mirror: string, kind: FailureKind): void;
  delivered(mirror: string): void;
  skipped(mirror: string, events: number): void;
  /** Seconds from commit to acknowledgement. */
  lag(mirror: string, seconds: number): void;
}

export interface DeliveryOptions {
  feed: ChangeFeed;
  mirrors: MirrorConfig[];
  dataDir: string;
  log: DeliveryLog;
  metrics: DeliveryMetrics;
  timeoutMs: number;
  maxBackoffMs: number;
  stallAfterMs: number;
  /** Concurrent deliveries per mirror: a slow mirror uses its own slots only. */
  concurrency: number;
  baseBackoffMs?: number;
  recoveryConcurrency?: number;
  /** Called after a lane's state was saved to mirrors.sqlite (or the lane was dropped: its database is gone). */
  onSaved?(lane: Lane, dropped: boolean): void;
  /** True while the machine has no CPU to spare (cpu-pressure.ts): delivery then trickles. */
  shouldYield?(): boolean;
  /** A cluster node (gate.ts): may this event leave now? A lane that may not waits for the next notice. */
  gate?(scope: Scope, version: number): boolean;
}

export interface DeliveryEngine extends MirrorReport {
  /** Resolves when the start-up scan of databases on disk has finished (it runs in the background). */
  readonly recovered: Promise<void>;
  /** Every lane, for tests and diagnostics. */
  lanes(): Iterable<Lane>;
  /** Something above `version` may exist in the database's change log: a commit hint, or a status read. */
  notice(scope: Scope, version: number): void;
  /** Another node reported the mirror to have acknowledged `version` of the database (a cluster's follower): resume from there at least. */
  seed(scope: Scope, mirror: string, version: number): void;
  close(): Promise<void>;
}

interface MirrorRuntime {
  sender: MirrorSender;
  limiter: Limiter;
}

export function createDeliveryEngine(opts: DeliveryOptions): DeliveryEngine {
  const { log, metrics: m } = opts;
  const store = new DeliveryStore(join(opts.dataDir, 'mirrors.sqlite'));
  const policy: BackoffPolicy = { baseMs: Math.min(opts.baseBackoffMs ?? 500, opts.maxBackoffMs), maxMs: opts.maxBackoffMs };
  const mirrors = new Map<string, MirrorRuntime>(opts.mirrors.map((c) => [c.name, {
    sender: new MirrorSender(c, { timeoutMs: opts.timeoutMs, connections: opts.concurrency }), limiter: new Limiter(opts.concurrency),
  }]));
  const lanes = new Map<string, Map<string, Lane>>();
  const drains = new Set<Promise<void>>();
  const reads = new KeyedLimiter(READS, READS_PER_ORG);
  let closed = false;
  /** While yielding, when the next event may leave (performance.now()): one slot per 1/YIELD_EVENTS_PER_S, shared by all lanes. */
  let nextYieldSlot = 0;

  function laneOf(scope: Scope, mirror: string): Lane {
    const key = scopeKey(scope);
    let byMirror = lanes.get(key);
    if (!byMirror) lanes.set(key, (byMirror = new Map()));
    let lane = byMirror.get(mirror);
    if (!lane) byMirror.set(mirror, (lane = new Lane(mirror, { org: scope.org, repo: scope.repo, database: scope.database })));
    return lane;
  }

  // Durable state first: acknowledged versions survive restarts; lanes of mirrors no longer configured are ignored.
  for (const row of store.all()) {
    if (!mirrors.has(row.mirror)) continue;
    const lane = laneOf(row, row.mirror);
    lane.delivered = lane.saved = lane.known = row.deliveredVersion;
    lane.lastError = row.lastError;
    lane.lastSuccessAt = row.lastSuccessAt;
    lane.failingSince = row.failingSince;
  }

  function notice(scope: Scope, version: number): void {
    if (closed) return;
    for (const name of mirrors.keys()) {
      const lane = laneOf(scope, name);
      if (version > lane.known) lane.known = version;
      if (lane.known > lane.delivered) kick(lane);
    }
  }

  function kick(lane: Lane): void {
    if (closed || lane.active || lane.timer !== null) return;
    lane.active = true;
    const run = drain(lane).catch((e) => log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'mirror delivery bug'));
    drains.add(run);
    void run.finally(() => drains.delete(run));
  }

  async function drain(lane: Lane): Promise<void> {
    const mirror = mirrors.get(lane.mirror)!;
    let release: (() => void) | null = null;
    let failed = false;
    let held = false;
    try {
      // Not this node's to send (yet): the cluster's next grant notices the lane again. Checked before reading too,
      // so a follower's lanes read nothing and hold no events in memory.
      if (!mayLeave(lane, lane.buffer[0]?.version ?? lane.delivered + 1)) held = true;
      // Read before taking a delivery slot: a read waits for the tenant's executors, never holding a slot every org shares.
      else if (await fill(lane) && !closed) {
        release = await mirror.limiter.acquire();
        while (!closed && lane.buffer.length > 0) {
          const event = lane.buffer[0]!;
          if (!mayLeave(lane, event.version)) {
            held = true;
            break;
          }
          if (opts.shouldYield?.()) {
            await yieldSlot();
            if (closed) break;
          }
          m.attempt(lane.mirror);
          const outcome = await mirror.sender.send(event);
          if (outcome.ok) onSuccess(lane, event);
          else if (!closed) {
            onFailure(lane, outcome);
            failed = true;
            break;
          }
        }
      }
    } catch (e) {
      failed = await onReadError(lane, e);
    } finally {
      saveAcknowledged(lane); // once per turn, not per event: a crash before it only means re-delivery (at least once)
      release?.();
      lane.active = false;
      if (lane.seedTo > lane.delivered) raise(lane, lane.seedTo);
    }
    if (closed) return;
    if (failed) scheduleRetry(lane);
    else if (!held && lane.known > lane.delivered) setImmediate(() => kick(lane)); // next turn, behind databases already waiting
  }

  function mayLeave(lane: Lane, version: number): boolean {
    return !opts.gate || opts.gate(lane.scope, version);
  }

  async function yieldSlot(): Promise<void> {
    const now = performance.now();
    const at = Math.max(now, nextYieldSlot);
    nextYieldSlot = at + 1000 / YIELD_EVENTS_PER_S;
    if (at > now) await sleep(at - now);
  }

  /** Reads the lane's next page when its buffer is empty; false when there is nothing to send. */
  async function fill(lane: Lane): Promise<boolean> {
    if (lane.buffer.length > 0) return true;
    if (lane.known <= lane.delivered) return false;
    const release = await reads.acquire(lane.scope.org);
    const knownBefore = lane.known;
    let batch: { events: ChangeEvent[]; version: number };
    try {
      if (closed) return false;
      batch = await opts.feed.readChanges(lane.scope, lane.delivered, READ_BATCH);
    } finally {
      release();
    }
    const hintedMeanwhile = lane.known > knownBefore; // the page may predate that hint's commit: the drain comes back for it
    if (batch.version > lane.known) lane.known = batch.version;
    lane.buffer = batch.events.filter((e) => e.version > lane.delivered);
    if (lane.buffer.length === 0) {
      if (hintedMeanwhile) return false;
      // The log holds nothing above what was delivered: the hint overshot; stop rather than spin.
      if (batch.version > lane.delivered) log.warn({ mirror: lane.mirror, ...lane.scope, delivered: lane.delivered, version: batch.version }, 'change log has no events above the delivered version');
      lane.known = lane.delivered;
      return false;
    }
    return true;
  }

  function onSuccess(lane: Lane, event: ChangeEvent): void {
    const now = Date.now();
    lane.buffer.shift();
    if (lane.failingSince !== null) log.info({ mirror: lane.mirror, ...lane.scope, version: event.version, failedAttempts: lane.attempts }, 'mirror delivery recovered');
    lane.delivered = event.version;
    lane.attempts = 0;
    lane.lastError = null;
    lane.failingSince = null;
    lane.stallReported = false;
    lane.lastSuccessAt = now;
    m.delivered(lane.mirror);
    const committed = Date.parse(event.committedAt);
    if (Number.isFinite(committed)) m.lag(lane.mirror, Math.max(0, now - committed) / 1000);
    if (now - lane.savedAt >= SAVE_EVERY_MS) saveAcknowledged(lane);
  }

  /** Saves what the mirror acknowledged during this turn in one write; if that fails, the next save point tries again. */
  function saveAcknowledged(lane: Lane): void {
    if (lane.delivered <= lane.saved) return;
    lane.savedAt = Date.now(); // also after a failure: at most one try per SAVE_EVERY_MS or turn
    try {
      store.recordSuccess(lane.mirror, lane.scope, lane.delivered, lane.lastSuccessAt ?? lane.savedAt);
    } catch (e) {
      log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'saving acknowledgements failed (after a restart they are sent again)');
      return;
    }
    lane.saved = lane.delivered;
    opts.onSaved?.(lane, false);
  }

  function onFailure(lane: Lane, outcome: Extract<Outcome, { ok: false }>): void {
    m.failure(lane.mirror, outcome.kind);
    recordFailure(lane, outcome.error);
  }

  function recordFailure(lane: Lane, error: string): void {
    saveAcknowledged(lane); // before the failure: saving a success clears the row's error
    const now = Date.now();
    lane.attempts++;
    lane.lastError = error;
    lane.failingSince ??= now;
    lane.buffer = []; // re-read on retry: a long outage must not pin events in memory
    store.recordFailure(lane.mirror, lane.scope, lane.delivered, error, lane.failingSince);
    opts.onSaved?.(lane, false);
    const ctx = { mirror: lane.mirror, ...lane.scope, version: lane.delivered + 1, attempts: lane.attempts, error };
    if (lane.isStalled(now, opts.stallAfterMs) && !lane.stallReported) {
      lane.stallReported = true;
      log.warn({ ...ctx, failingSinceMs: now - lane.failingSince }, 'mirror delivery stalled (events are kept and still retried)');
    } else if (lane.attempts === 1) log.warn(ctx, 'mirror delivery failed; retrying with backoff');
    else log.debug(ctx, 'mirror delivery failed again');
  }

  /** Returns true when the lane should retry later. */
  async function onReadError(lane: Lane, e: unknown): Promise<boolean> {
    lane.buffer = [];
    if (closed) return false; // a read cut short by close(): nothing to record
    if (e instanceof ApiError && e.code === 'database_not_found') {
      lanes.get(scopeKey(lane.scope))?.delete(lane.mirror);
      store.forget(lane.mirror, lane.scope);
      lane.saved = lane.delivered; // nothing left to save: the row is gone
      opts.onSaved?.(lane, true);
      return false;
    }
    try {
      if (e instanceof ApiError && e.code === 'gone') {
        await skipPastRetention(lane);
        return false;
      }
    } catch (again) {
      e = again;
    }
    log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'reading the change log failed');
    recordFailure(lane, 'reading the change log failed');
    return true;
  }

  /** Events this mirror never acknowledged were dropped from the log (e.g. a mirror added later): resume at the oldest kept. */
  async function skipPastRetention(lane: Lane): Promise<void> {
    const current = (await opts.feed.currentVersion(lane.scope)) ?? lane.delivered;
    let gone = lane.delivered;
    let kept = Math.max(current, lane.delivered);
    while (kept - gone > 1) {
      const mid = Math.floor((gone + kept) / 2);
      try {
        await opts.feed.readChanges(lane.scope, mid, 1);
        kept = mid;
      } catch (e) {
        if (!(e instanceof ApiError && e.code === 'gone')) throw e;
        gone = mid;
      }
    }
    const error = `events ${lane.delivered + 1}..${kept} were no longer kept and were skipped; the mirror must resync from /_db/snapshot`;
    log.warn({ mirror: lane.mirror, ...lane.scope, from: lane.delivered + 1, to: kept }, 'skipped events past retention');
    m.skipped(lane.mirror, kept - lane.delivered);
    saveAcknowledged(lane);
    lane.delivered = lane.saved = kept;
    lane.lastError = error;
    store.skipTo(lane.mirror, lane.scope, kept, error);
    opts.onSaved?.(lane, false);
  }

  /** Moves an idle lane's acknowledged version up to a cursor reported by another node (a lower bound of what the mirror holds). */
  function raise(lane: Lane, version: number): void {
    lane.seedTo = 0;
    if (version <= lane.delivered) return;
    lane.buffer = [];
    saveAcknowledged(lane);
    lane.delivered = lane.saved = version;
    if (version > lane.known) lane.known = version;
    try {
      store.raise(lane.mirror, lane.scope, version);
    } catch (e) {
      log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'saving a replicated cursor failed');
    }
    opts.onSaved?.(lane, false);
  }

  function scheduleRetry(lane: Lane): void {
    const stalled = lane.isStalled(Date.now(), opts.stallAfterMs);
    // Stalled lanes keep trying at the capped interval; others back off exponentially.
    const delay = backoffDelay(policy, stalled ? 64 : lane.attempts);
    lane.timer = setTimeout(() => {
      lane.timer = null;
      kick(lane);
    }, delay);
    lane.timer.unref();
  }

  function* allLanes(): Iterable<Lane> {
    for (const byMirror of lanes.values()) yield* byMirror.values();
  }

  opts.feed.onCommit((scope, version) => notice(scope, version));
  const recovered = scanDatabases(opts.feed, opts.recoveryConcurrency ?? 4, () => closed, async (scope) => {
    let version: number | null;
    try {
      version = await opts.feed.currentVersion(scope);
    } catch (e) {
      // One database that cannot be read now (its executors busy, a file being made) must not end the scan for all.
      log.warn({ err: e, ...scope }, 'mirror recovery could not read a database\'s version; a write or status read finds its backlog');
      return;
    }
    if (version !== null && version > 0) notice(scope, version);
  }).catch((e) => log.error({ err: e }, 'mirror recovery scan failed'));

  return {
    recovered,
    lanes: allLanes,
    notice,
    seed(scope: Scope, mirror: string, version: number): void {
      if (closed || !mirrors.has(mirror)) return;
      const lane = laneOf(scope, mirror);
      // A drain in progress owns the lane's buffer and version: the cursor is taken when it ends.
      if (lane.active) lane.seedTo = Math.max(lane.seedTo, version);
      else raise(lane, version);
    },
    states(scope: Scope, currentVersion: number): MirrorState[] {
      if (currentVersion > 0) notice(scope, currentVersion); // a missed hint heals here
      const now = Date.now();
      return [...mirrors.keys()].map((name) => {
        const lane = lanes.get(scopeKey(scope))?.get(name);
        const delivered = lane?.delivered ?? 0;
        return {
          name, deliveredVersion: delivered, pendingEvents: Math.max(0, currentVersion - delivered),
          lastError: lane?.lastError ?? null, stalled: lane?.isStalled(now, opts.stallAfterMs) ?? false,
        };
      });
    },
    acknowledgedFloor(scope: Scope): number | null {
      if (mirrors.size === 0) return null;
      const byMirror = lanes.get(scopeKey(scope));
      let floor = Infinity;
      // Saved, not merely acknowledged: after a crash the lane resumes from what was saved, and that must still be kept.
      for (const name of mirrors.keys()) floor = Math.min(floor, byMirror?.get(name)?.saved ?? 0);
      return floor;
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const lane of allLanes()) {
        if (lane.timer) clearTimeout(lane.timer);
        lane.timer = null;
      }
      for (const mirror of mirrors.values()) mirror.limiter.close();
      reads.close();
      await Promise.all([...mirrors.values()].map((mirror) => mirror.sender.close())); // attempts in flight fail now
      await Promise.allSettled([...drains, recovered]);
      store.close();
    },
  };
}
