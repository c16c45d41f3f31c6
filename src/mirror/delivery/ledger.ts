// Every lane's delivery state, in memory and in DATA_DIR/mirrors.sqlite: what each mirror acknowledged (saved once per
// turn), why it fails, since when. The drain loop (engine.ts) says what happened; this records, logs and reports it.
import { join } from 'node:path';
import type { ChangeEvent, MirrorState, Scope } from '../../db/contract.ts';
import { Lane, scopeKey } from './lane.ts';
import type { DeliveryOptions } from './options.ts';
import { DeliveryStore } from './store.ts';

/** Acknowledgements are saved once per turn, and at least this often during a slow turn (status shows saved ones). */
const SAVE_EVERY_MS = 100;

type LedgerOptions = Pick<DeliveryOptions, 'dataDir' | 'log' | 'metrics' | 'stallAfterMs' | 'onSaved'>;

export class Ledger {
  /** The configured mirrors' names, in DB_MIRRORS order. */
  readonly mirrors: readonly string[];
  private readonly opts: LedgerOptions;
  private readonly store: DeliveryStore;
  /** Database → mirror → lane. */
  private readonly lanes = new Map<string, Map<string, Lane>>();

  constructor(opts: LedgerOptions, mirrors: string[]) {
    this.opts = opts;
    this.mirrors = mirrors;
    this.store = new DeliveryStore(join(opts.dataDir, 'mirrors.sqlite'));
    // Durable state first: acknowledged versions survive restarts; lanes of mirrors no longer configured are ignored.
    for (const row of this.store.all()) {
      if (!mirrors.includes(row.mirror)) continue;
      const lane = this.lane(row, row.mirror);
      lane.delivered = lane.saved = lane.known = row.deliveredVersion;
      lane.lastError = row.lastError;
      lane.lastSuccessAt = row.lastSuccessAt;
      lane.failingSince = row.failingSince;
    }
  }

  lane(scope: Scope, mirror: string): Lane {
    const key = scopeKey(scope);
    let byMirror = this.lanes.get(key);
    if (!byMirror) this.lanes.set(key, (byMirror = new Map()));
    let lane = byMirror.get(mirror);
    if (!lane) byMirror.set(mirror, (lane = new Lane(mirror, { org: scope.org, repo: scope.repo, database: scope.database })));
    return lane;
  }

  *all(): Iterable<Lane> {
    for (const byMirror of this.lanes.values()) yield* byMirror.values();
  }

  /** The mirror acknowledged the lane's next event. */
  succeeded(lane: Lane, event: ChangeEvent): void {
    const { log, metrics } = this.opts;
    const now = Date.now();
    lane.buffer.shift();
    if (lane.failingSince !== null) log.info({ mirror: lane.mirror, ...lane.scope, version: event.version, failedAttempts: lane.attempts }, 'mirror delivery recovered');
    lane.delivered = event.version;
    lane.attempts = 0;
    lane.lastError = null;
    lane.failingSince = null;
    lane.stallReported = false;
    lane.resumed = false;
    lane.lastSuccessAt = now;
    metrics.delivered(lane.mirror);
    const committed = Date.parse(event.committedAt);
    if (Number.isFinite(committed)) metrics.lag(lane.mirror, Math.max(0, now - committed) / 1000);
    if (now - lane.savedAt >= SAVE_EVERY_MS) this.save(lane);
  }

  /** Saves what the mirror acknowledged during this turn in one write; if that fails, the next save point tries again. */
  save(lane: Lane): void {
    if (lane.delivered <= lane.saved) return;
    lane.savedAt = Date.now(); // also after a failure: at most one try per SAVE_EVERY_MS or turn
    try {
      this.store.recordSuccess(lane.mirror, lane.scope, lane.delivered, lane.lastSuccessAt ?? lane.savedAt);
    } catch (e) {
      this.opts.log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'saving acknowledgements failed (after a restart they are sent again)');
      return;
    }
    lane.saved = lane.delivered;
    this.opts.onSaved?.(lane, false);
  }

  /** An attempt or a read failed: the lane retries later (its buffer is dropped: a long outage pins no events in memory). */
  failed(lane: Lane, error: string): void {
    this.save(lane); // before the failure: saving a success clears the row's error
    const now = Date.now();
    lane.attempts++;
    lane.lastError = error;
    lane.failingSince ??= now;
    lane.buffer = [];
    this.store.recordFailure(lane.mirror, lane.scope, lane.delivered, error, lane.failingSince);
    this.opts.onSaved?.(lane, false);
    const ctx = { mirror: lane.mirror, ...lane.scope, version: lane.delivered + 1, attempts: lane.attempts, error };
    if (lane.isStalled(now, this.opts.stallAfterMs) && !lane.stallReported) {
      lane.stallReported = true;
      this.opts.log.warn({ ...ctx, failingSinceMs: now - lane.failingSince }, 'mirror delivery stalled (events are kept and still retried)');
    } else if (lane.attempts === 1) this.opts.log.warn(ctx, 'mirror delivery failed; retrying with backoff');
    else this.opts.log.debug(ctx, 'mirror delivery failed again');
  }

  /** The lane's database is gone: its lane and row too. */
  forget(lane: Lane): void {
    this.lanes.get(scopeKey(lane.scope))?.delete(lane.mirror);
    this.store.forget(lane.mirror, lane.scope);
    lane.saved = lane.delivered; // nothing left to save: the row is gone
    this.opts.onSaved?.(lane, true);
  }

  /** Events up to `kept` are no longer in the change log: the lane resumes after them, and says so. */
  skipTo(lane: Lane, kept: number): void {
    const error = `events ${lane.delivered + 1}..${kept} were no longer kept and were skipped; the mirror must resync from /_db/snapshot`;
    this.opts.log.warn({ mirror: lane.mirror, ...lane.scope, from: lane.delivered + 1, to: kept }, 'skipped events past retention');
    this.opts.metrics.skipped(lane.mirror, kept - lane.delivered);
    this.save(lane);
    lane.delivered = lane.saved = kept;
    lane.lastError = error;
    this.store.skipTo(lane.mirror, lane.scope, kept, error);
    this.opts.onSaved?.(lane, false);
  }

  /** Moves an idle lane's acknowledged version up to a cursor reported by another node (a lower bound of what the mirror holds). */
  raise(lane: Lane, version: number): void {
    lane.seedTo = 0;
    if (version <= lane.delivered) return;
    lane.buffer = [];
    this.save(lane);
    lane.delivered = lane.saved = version;
    if (version > lane.known) lane.known = version;
    try {
      this.store.raise(lane.mirror, lane.scope, version);
    } catch (e) {
      this.opts.log.error({ err: e, mirror: lane.mirror, ...lane.scope }, 'saving a replicated cursor failed');
    }
    this.opts.onSaved?.(lane, false);
  }

  /** Each mirror's delivery of the database, for /_db/status. */
  states(scope: Scope, currentVersion: number): MirrorState[] {
    const now = Date.now();
    const byMirror = this.lanes.get(scopeKey(scope));
    return this.mirrors.map((name) => {
      const lane = byMirror?.get(name);
      const delivered = lane?.delivered ?? 0;
      return {
        name, deliveredVersion: delivered, pendingEvents: Math.max(0, currentVersion - delivered),
        lastError: lane?.lastError ?? null, stalled: lane?.isStalled(now, this.opts.stallAfterMs) ?? false,
      };
    });
  }

  /** The lowest version every mirror saved as acknowledged (0 for one that never did); null with no mirrors. */
  floor(scope: Scope): number | null {
    if (this.mirrors.length === 0) return null;
    const byMirror = this.lanes.get(scopeKey(scope));
    let floor = Infinity;
    // Saved, not merely acknowledged: after a crash the lane resumes from what was saved, and that must still be kept.
    for (const name of this.mirrors) floor = Math.min(floor, byMirror?.get(name)?.saved ?? 0);
    return floor;
  }

  close(): void {
    this.store.close();
  }
}
