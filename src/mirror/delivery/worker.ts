// Delivers every change event to every mirror: per (mirror, database) in version order, retried until acknowledged.
import { join } from 'node:path';
import type { ChangeEvent, ChangeFeed, MirrorReport, MirrorState, Scope } from '../../db/contract.ts';
import type { MirrorConfig } from '../../shared/config.ts';
import { ApiError } from '../../shared/errors.ts';
import type { Logger } from '../../shared/log.ts';
import { backoffDelay, type BackoffPolicy } from './backoff.ts';
import { Lane, scopeKey } from './lane.ts';
import { Limiter } from './limiter.ts';
import * as m from './metrics.ts';
import { createAgent, MirrorSender, type Outcome } from './sender.ts';
import { DeliveryStore } from './store.ts';
import { scanDatabases } from './recovery.ts';

/** Events read from the change log per read. */
const READ_BATCH = 32;
/** Events one database may send before giving its delivery slot to the next waiting database (fairness). */
const TURN_EVENTS = 64;

export interface DeliveryOptions {
  feed: ChangeFeed;
  mirrors: MirrorConfig[];
  dataDir: string;
  logger: Logger;
  timeoutMs: number;
  maxBackoffMs: number;
  stallAfterMs: number;
  /** Concurrent deliveries per mirror: a slow mirror uses its own slots only. */
  concurrency: number;
  baseBackoffMs?: number;
  recoveryConcurrency?: number;
}

interface MirrorRuntime {
  sender: MirrorSender;
  limiter: Limiter;
}

export interface DeliveryWorker extends MirrorReport {
  /** Resolves when the start-up scan of databases on disk has finished (it runs in the background). */
  readonly recovered: Promise<void>;
  /** Every lane, for tests and diagnostics. */
  lanes(): Lane[];
  close(): Promise<void>;
}

export function createDeliveryWorker(opts: DeliveryOptions): DeliveryWorker {
  const log = opts.logger.child({ component: 'mirror-delivery' });
  const store = new DeliveryStore(join(opts.dataDir, 'mirrors.sqlite'));
  const agent = createAgent(opts.timeoutMs, opts.concurrency);
  const abort = new AbortController();
  const policy: BackoffPolicy = { baseMs: Math.min(opts.baseBackoffMs ?? 500, opts.maxBackoffMs), maxMs: opts.maxBackoffMs };
  const mirrors = new Map<string, MirrorRuntime>(opts.mirrors.map((c) => [c.name, { sender: new MirrorSender(c, agent), limiter: new Limiter(opts.concurrency) }]));
  const lanes = new Map<string, Map<string, Lane>>();
  const drains = new Set<Promise<void>>();
  let closed = false;

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
    lane.delivered = lane.known = row.deliveredVersion;
    lane.lastError = row.lastError;
    lane.lastSuccessAt = row.lastSuccessAt;
    lane.failingSince = row.failingSince;
  }

  /** Something above `version` may exist: make sure every mirror's lane for the database is moving. */
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
    const release = await mirror.limiter.acquire();
    let failed = false;
    try {
      for (let sent = 0; !closed && sent < TURN_EVENTS; sent++) {
        const event = await nextEvent(lane);
        if (event === null || closed) break;
        m.attempts.inc({ mirror: lane.mirror });
        const outcome = await mirror.sender.send(event, { timeoutMs: opts.timeoutMs, signal: abort.signal });
        if (closed) break;
        if (outcome.ok) onSuccess(lane, event);
        else {
          onFailure(lane, outcome);
          failed = true;
          break;
        }
      }
    } catch (e) {
      failed = await onReadError(lane, e);
    } finally {
      release();
      lane.active = false;
    }
    if (closed) return;
    if (failed) scheduleRetry(lane);
    else if (lane.known > lane.delivered) setImmediate(() => kick(lane)); // next turn, behind databases already waiting
  }

  async function nextEvent(lane: Lane): Promise<ChangeEvent | null> {
    if (lane.buffer.length === 0) {
      if (lane.known <= lane.delivered) return null;
      const batch = await opts.feed.readChanges(lane.scope, lane.delivered, READ_BATCH);
      if (batch.version > lane.known) lane.known = batch.version;
      lane.buffer = batch.events.filter((e) => e.version > lane.delivered);
      if (lane.buffer.length === 0) {
        // The log holds nothing above what was delivered: the hint overshot; stop rather than spin.
        if (batch.version > lane.delivered) log.warn({ mirror: lane.mirror, ...lane.scope, delivered: lane.delivered, version: batch.version }, 'change log has no events above the delivered version');
        lane.known = lane.delivered;
        return null;
      }
    }
    return lane.buffer[0]!;
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
    store.recordSuccess(lane.mirror, lane.scope, event.version, now);
    m.delivered.inc({ mirror: lane.mirror });
    const committed = Date.parse(event.committedAt);
    if (Number.isFinite(committed)) m.lag.observe({ mirror: lane.mirror }, Math.max(0, now - committed) / 1000);
  }

  function onFailure(lane: Lane, outcome: Extract<Outcome, { ok: false }>): void {
    m.failures.inc({ mirror: lane.mirror, kind: outcome.kind });
    recordFailure(lane, outcome.error);
  }

  function recordFailure(lane: Lane, error: string): void {
    const now = Date.now();
    lane.attempts++;
    lane.lastError = error;
    lane.failingSince ??= now;
    lane.buffer = []; // re-read on retry: a long outage must not pin events in memory
    store.recordFailure(lane.mirror, lane.scope, lane.delivered, error, lane.failingSince);
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
    if (e instanceof ApiError && e.code === 'database_not_found') {
      lanes.get(scopeKey(lane.scope))?.delete(lane.mirror);
      store.forget(lane.mirror, lane.scope);
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
    m.skipped.inc({ mirror: lane.mirror }, kept - lane.delivered);
    lane.delivered = kept;
    lane.lastError = error;
    store.skipTo(lane.mirror, lane.scope, kept, error);
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

  const unregister = m.registerLaneSource(function* () {
    const now = Date.now();
    for (const l of allLanes()) {
      yield { mirror: l.mirror, ...l.scope, delivered: l.delivered, pending: l.pending(), stalled: l.isStalled(now, opts.stallAfterMs) };
    }
  });

  opts.feed.onCommit((scope, version) => notice(scope, version));
  const recovered = scanDatabases(opts.feed, opts.recoveryConcurrency ?? 4, () => closed, async (scope) => {
    const version = await opts.feed.currentVersion(scope);
    if (version !== null && version > 0) notice(scope, version);
  }).catch((e) => log.error({ err: e }, 'mirror recovery scan failed'));

  return {
    recovered,
    lanes: () => [...allLanes()],
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
      for (const name of mirrors.keys()) floor = Math.min(floor, byMirror?.get(name)?.delivered ?? 0);
      return floor;
    },
    async close() {
      if (closed) return;
      closed = true;
      abort.abort();
      for (const lane of allLanes()) {
        if (lane.timer) clearTimeout(lane.timer);
        lane.timer = null;
      }
      for (const mirror of mirrors.values()) mirror.limiter.close();
      await Promise.allSettled([...drains, recovered]);
      unregister();
      await agent.close();
      store.close();
    },
  };
}
