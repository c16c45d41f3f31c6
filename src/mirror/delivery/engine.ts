// Delivers every change event to every mirror: per (mirror, database) in version order, retried until acknowledged.
// Runs wherever it is given a feed, a logger and metrics: on the delivery thread in the product (thread.ts), in-process in tests.
// This file is the drain loop (read a page, send it, retry); what each lane acknowledged and why it fails is the ledger's.
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChangeEvent, ChangeFeed, MirrorState, Scope } from '../../db/contract.ts';
import { ApiError } from '../../shared/errors.ts';
import { backoffDelay, type BackoffPolicy } from './backoff.ts';
import type { Lane } from './lane.ts';
import { Ledger } from './ledger.ts';
import { KeyedLimiter, Limiter } from './limiter.ts';
import type { DeliveryEngine, DeliveryOptions } from './options.ts';
import { scanDatabases } from './recovery.ts';
import { MirrorSender } from './sender.ts';
import { Outage } from './outage.ts';

export type { DeliveryEngine, DeliveryLog, DeliveryMetrics, DeliveryOptions } from './options.ts';

/** Events read from the change log per read: a turn sends at most one read's worth, then gives its delivery slot to the next waiting database (fairness). */
const READ_BATCH = 64;
/** Change-log reads in flight at once (each waits for an executor), and per org: an org whose reads are slow (its schema) holds at most its own. */
const READS = 16;
const READS_PER_ORG = 2;
/** While the machine has no CPU to spare, delivery as a whole sends at most this many events a second (every lane still moves). */
const YIELD_EVENTS_PER_S = 200;

interface MirrorRuntime {
  sender: MirrorSender;
  limiter: Limiter;
  outage: Outage;
}

export function createDeliveryEngine(opts: DeliveryOptions): DeliveryEngine {
  const { log, metrics: m } = opts;
  const policy: BackoffPolicy = { baseMs: Math.min(opts.baseBackoffMs ?? 500, opts.maxBackoffMs), maxMs: opts.maxBackoffMs };
  const mirrors = new Map<string, MirrorRuntime>(opts.mirrors.map((c) => [c.name, {
    sender: new MirrorSender(c, { timeoutMs: opts.timeoutMs, connections: opts.concurrency }), limiter: new Limiter(opts.concurrency), outage: new Outage(),
  }]));
  const ledger = new Ledger(opts, [...mirrors.keys()]);
  const drains = new Set<Promise<void>>();
  const reads = new KeyedLimiter(READS, READS_PER_ORG);
  let closed = false;
  /** While yielding, when the next event may leave (performance.now()): one slot per 1/YIELD_EVENTS_PER_S, shared by all lanes. */
  let nextYieldSlot = 0;

  function notice(scope: Scope, version: number): void {
    if (closed) return;
    for (const [name, mirror] of mirrors) {
      const lane = ledger.lane(scope, name);
      const committed = version > lane.known;
      if (committed) lane.known = version;
      if (lane.known <= lane.delivered) continue;
      // A new commit on a lane waiting out its backoff: at most one such lane a second tries now (outage.ts).
      if (committed && lane.timer !== null && mirror.outage.probe(lane, performance.now())) endWait(lane);
      kick(lane);
    }
  }

  function endWait(lane: Lane): void {
    clearTimeout(lane.timer!);
    lane.timer = null;
  }

  /** The mirror is back from an outage: every lane waiting out a backoff tries now, once per failure run. */
  function resume(name: string): void {
    for (const lane of ledger.all()) {
      if (lane.mirror !== name || lane.timer === null || lane.resumed) continue;
      lane.resumed = true;
      endWait(lane);
      kick(lane);
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
          if (outcome.ok) {
            ledger.succeeded(lane, event);
            if (mirror.outage.succeeded(performance.now())) resume(lane.mirror);
          } else if (!closed) {
            mirror.outage.failed();
            m.failure(lane.mirror, outcome.kind);
            ledger.failed(lane, outcome.error);
            failed = true;
            break;
          }
        }
      }
    } catch (e) {
      failed = await onReadError(lane, e);
    } finally {
      ledger.save(lane); // once per turn, not per event: a crash before it only means re-delivery (at least once)
      release?.();
      lane.active = false;
      mirror.outage.ended(lane);
      if (lane.seedTo > lane.delivered) ledger.raise(lane, lane.seedTo);
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

  /** Returns true when the lane should retry later. */
  async function onReadError(lane: Lane, e: unknown): Promise<boolean> {
    lane.buffer = [];
    if (closed) return false; // a read cut short by close(): nothing to record
    if (e instanceof ApiError && e.code === 'database_not_found') {
      ledger.forget(lane);
      return false;
    }
    try {
      if (e instanceof ApiError && e.code === 'gone') {
        // Events this mirror never acknowledged were dropped from the log (e.g. a mirror added later): resume at the oldest kept.
        ledger.skipTo(lane, await oldestKept(opts.feed, lane.scope, lane.delivered));
        return false;
      }
    } catch (again) {
      e = again;
    }
    log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'reading the change log failed');
    ledger.failed(lane, 'reading the change log failed');
    return true;
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
    lanes: () => ledger.all(),
    notice,
    seed(scope: Scope, mirror: string, version: number): void {
      if (closed || !mirrors.has(mirror)) return;
      const lane = ledger.lane(scope, mirror);
      // A drain in progress owns the lane's buffer and version: the cursor is taken when it ends.
      if (lane.active) lane.seedTo = Math.max(lane.seedTo, version);
      else ledger.raise(lane, version);
    },
    states(scope: Scope, currentVersion: number): MirrorState[] {
      if (currentVersion > 0) notice(scope, currentVersion); // a missed hint heals here
      return ledger.states(scope, currentVersion);
    },
    acknowledgedFloor: (scope: Scope) => ledger.floor(scope),
    async close() {
      if (closed) return;
      closed = true;
      for (const lane of ledger.all()) {
        if (lane.timer) clearTimeout(lane.timer);
        lane.timer = null;
      }
      for (const mirror of mirrors.values()) mirror.limiter.close();
      reads.close();
      await Promise.all([...mirrors.values()].map((mirror) => mirror.sender.close())); // attempts in flight fail now
      await Promise.allSettled([...drains, recovered]);
      ledger.close();
    },
  };
}

/** The oldest version the change log still keeps above `gone` (binary search: reads of one event each). */
async function oldestKept(feed: ChangeFeed, scope: Scope, gone: number): Promise<number> {
  let kept = Math.max((await feed.currentVersion(scope)) ?? gone, gone);
  while (kept - gone > 1) {
    const mid = Math.floor((gone + kept) / 2);
    try {
      await feed.readChanges(scope, mid, 1);
      kept = mid;
    } catch (e) {
      if (!(e instanceof ApiError && e.code === 'gone')) throw e;
      gone = mid;
    }
  }
  return kept;
}
