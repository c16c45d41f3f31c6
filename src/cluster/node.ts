// A `serve db` node in a cluster: holds a lease, answers only for databases it is primary of (within its lease),
// ships each write to the follower before the 200, and as a follower applies what it is sent and fences lower
// epochs; the txns that change placement (claim, give-back, promotion, retake, handover) are placement-changes.ts.
import { existsSync } from 'node:fs';
import type { MirrorGate, Replication, Scope } from '../db/contract.ts';
import type { DbService } from '../db/service.ts';
import { ApiError } from '../shared/errors.ts';
import type { ClusterConfig } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import { Etcd } from './etcd.ts';
import { databasesOf, PlacementWatch, pollEveryMs, scopeKey, scopeOf, type Placement, type View } from './placement.ts';
import { Shipper } from './shipper.ts';
import { Claims } from './claims.ts';
import { NodeLease } from './lease.ts';
import { PlacementChanges, notHere } from './placement-changes.ts';
import { notFound } from '../db/pipeline-backend.ts';
import { clearRestoredMark } from '../db/backup-restored.ts';

export class ClusterNode implements Replication {
  readonly etcd: Etcd;
  readonly watch: PlacementWatch;
  readonly id: string;
  private readonly config: ClusterConfig & { nodeId: string; advertiseUrl: string };
  private readonly db: DbService;
  readonly logger: Logger;
  readonly shipper: Shipper;
  private readonly lease: NodeLease;
  private keepAliveTimer: NodeJS.Timeout | null = null;
  /** The highest epoch seen per database: anything shipped under a lower one is refused (the fence). */
  readonly highestEpoch = new Map<string, number>();
  /** Databases whose work (applies, promotion) runs one at a time, in arrival order. */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** Databases this node was refused as primary of: no more writes until placement says otherwise. */
  private readonly superseded = new Map<string, number>();
  /** Per database, the epoch under which this node's copy was last brought in line with the primary: only then may it take over. */
  private readonly synced = new Map<string, number>();
  /** Per database, its copy's version as of the last time it was brought in line (never above the file's): no file is opened here. */
  private readonly copyVersions = new Map<string, number>();
  /** Per database this node is primary of, the epoch whose follower it has brought in line (or is bringing). */
  private readonly followerSynced = new Map<string, string>();
  /** Databases being handed over to another node (a live move): no new writes are admitted. */
  private readonly draining = new Set<string>();
  /** Copies the executors were told to forget before this node wrote them as a follower. */
  readonly released = new Set<string>();
  /** Databases mirror delivery was granted for, and up to which version (revoked when this node stops being their primary). */
  private readonly granted = new Map<string, number>();
  private readonly mirrors: MirrorGate | null;
  /** Databases whose leader key this node, their recorded primary, is taking back (`retake`): not adopted meanwhile. */
  private readonly retaking = new Set<string>();
  /** This node's COMMITs are on its disk before they ship (DB_SYNC=full): only then may it take a database back. */
  private readonly durableCommits: boolean;
  /** Writes admitted per database, and new databases nothing was made of yet: a failed first write gives its claim back. */
  private readonly claims = new Claims((key) => this.changes.unclaim(key), (key) => existsSync(this.db.databasePath(scopeOf(key))));
  private readonly changes: PlacementChanges;
  /** Async durability: databases whose last shipment failed, their timer to ship again and how many tries so far. */
  private readonly reshipTimers = new Map<string, NodeJS.Timeout>();
  private readonly reshipAttempts = new Map<string, number>();
  private closed = false;

  constructor(config: ClusterConfig, db: DbService, logger: Logger, token: string, mirrors: MirrorGate | null = null,
    { durableCommits = true, maxDatabasesPerRepo = Infinity }: { durableCommits?: boolean; maxDatabasesPerRepo?: number } = {}) {
    if (config.nodeId === null || config.advertiseUrl === null) throw new Error('a cluster node needs CLUSTER_NODE_ID and CLUSTER_ADVERTISE_URL');
    this.config = config as ClusterNode['config'];
    this.id = config.nodeId;
    this.db = db;
    this.logger = logger;
    this.mirrors = mirrors;
    this.durableCommits = durableCommits;
    this.etcd = new Etcd(config.etcd, Math.max(500, config.leaseTtlS * 250));
    this.lease = new NodeLease(this.etcd, config.leaseTtlS, config.nodeId, config.advertiseUrl, logger, {
      onDeadline: (untilMs) => mirrors?.leaseUntil(untilMs),
      // Leader keys die with the lease: no database is this node's to deliver any more.
      onLost: () => {
        this.granted.clear();
        mirrors?.revokeAll();
      },
    });
    this.watch = new PlacementWatch(this.etcd, pollEveryMs(config.leaseTtlS), (view) => this.act(view));
    this.shipper = new Shipper({ db, token, timeoutMs: config.leaseTtlS * 1000, onSuperseded: (scope) => this.superseded.set(scopeKey(scope), this.placement(scope)?.epoch ?? 0),
      onBehind: (scope, epoch) => this.stepDown(scopeKey(scope), epoch),
      cursors: mirrors ? (scope) => mirrors.cursors(scope) : undefined,
    });
    this.changes = new PlacementChanges({
      id: this.id, config, db, etcd: this.etcd, watch: this.watch, lease: this.lease, logger, shipper: this.shipper, mirrors, claims: this.claims, durableCommits, maxDatabasesPerRepo,
      highestEpoch: this.highestEpoch, superseded: this.superseded, synced: this.synced, copyVersions: this.copyVersions, followerSynced: this.followerSynced,
      draining: this.draining, released: this.released, granted: this.granted, retaking: this.retaking,
      primaryHere: (view, key, p) => this.primaryHere(view, key, p),
      grantDelivery: (scope, version) => this.grantDelivery(scope, version),
    });
  }

  async start(): Promise<void> {
    await this.lease.renew(true);
    await this.watch.start();
    const every = Math.max(200, (this.config.leaseTtlS * 1000) / 4);
    const tick = () => {
      this.lease.renew(false).catch((e) => this.logger.warn({ err: e }, 'cluster: lease renewal failed')).finally(() => {
        // Mirror cursors that moved without a write reach the followers too (a takeover then repeats less).
        for (const key of this.granted.keys()) this.shipper.pushCursors(scopeOf(key)).catch(() => {});
        if (!this.closed) this.keepAliveTimer = setTimeout(tick, every);
      });
    };
    this.keepAliveTimer = setTimeout(tick, every);
  }

  private placement(scope: Scope): Placement | undefined {
    return this.watch.view.placements.get(scopeKey(scope));
  }

  private primaryHere(view: View, key: string, p: Placement): boolean {
    return p.primary === this.id && view.leaders.get(key) === this.id && (this.superseded.get(key) ?? -1) < p.epoch;
  }

  // Replication (src/db/contract.ts)
  async admit(scope: Scope, write: boolean, creates = write): Promise<void> {
    if (!write) return this.admitHere(scope, false, false);
    // Counted from here to `settled`: a claim is given back only when no admitted write to the database is left.
    const key = scopeKey(scope);
    await this.claims.enter(key);
    try {
      await this.admitHere(scope, true, creates);
    } catch (e) {
      this.claims.leave(key);
      throw e;
    }
  }

  async settled(scope: Scope): Promise<void> {
    this.claims.leave(scopeKey(scope)); // an unwritten claim is given back once idle, not on this request's time
  }

  private async admitHere(scope: Scope, write: boolean, creates: boolean): Promise<void> {
    const key = scopeKey(scope);
    let p = this.placement(scope);
    if (p === undefined) {
      // One shared read per LOOKUP_GAP_MS at most, however many requests name databases that do not exist.
      p = (await this.watch.lookup()).placements.get(key);
      if (p === undefined && !write) return; // nowhere in the cluster: the local answer (not found) is the right one
      if (p === undefined && !creates) throw notFound(scope); // a restore: nothing to claim a placement for
      if (p === undefined) p = await this.changes.claim(scope, key);
    }
    if (!this.primaryHere(this.watch.view, key, p)) throw notHere(p.primary === this.id ? 'this node\'s term as its primary ended' : `node ${p.primary} is its primary`);
    if (write && this.lease.lapsed()) throw notHere('this node could not renew its lease in etcd');
    if (write && this.draining.has(key)) throw notHere(`it is moving to node ${this.watch.view.moves.get(key) ?? 'another node'}`);
  }

  databases(org: string, repo: string): string[] {
    return databasesOf(this.watch.view, org, repo);
  }

  async replicated(scope: Scope, version: number): Promise<void> {
    const view = this.watch.view;
    const key = scopeKey(scope);
    const p = view.placements.get(key);
    if (!p || !this.primaryHere(view, key, p)) throw notHere('this node stopped being its primary during the write');
    // The 200 does not wait: the follower gets the events as soon as it can (the loss window, docs/scaling.md).
    if (this.config.durability === 'async') return this.replicatedLater(scope, version);
    const url = p.follower === null ? undefined : view.nodes.get(p.follower);
    if (url === undefined) throw new ApiError('unavailable', 'the database has no live follower to confirm this write (strict durability); whether it survives a failover is unknown', { committed: null }, { 'retry-after': '1' });
    try {
      await this.shipper.ensure(scope, version, p.epoch, p.follower!, url);
    } catch (e) {
      // Its caller is told `committed: null`, but the write is on disk here: shipped again (while primary) until the
      // follower holds it, as async durability's are, not at the database's next write (a failover then lost it).
      this.reshipLater(key);
      throw e;
    }
    this.grantDelivery(scope, version);
  }

  replicatedLater(scope: Scope, version: number): void {
    const view = this.watch.view;
    const key = scopeKey(scope);
    const p = view.placements.get(key);
    if (!p || !this.primaryHere(view, key, p)) return; // no longer primary: placement brings the next one in line
    const url = p.follower === null ? undefined : view.nodes.get(p.follower);
    if (url !== undefined) this.shipAsync(key, version, p, url);
    else if (p.follower === null) this.grantDelivery(scope, version); // no follower: no other node can take over with less
  }

  /** Async durability: ships `version` without a caller waiting; a failure is shipped again by a timer (`reshipLater`). */
  private shipAsync(key: string, version: number, p: Placement, url: string): void {
    const scope = scopeOf(key);
    this.shipper.ensure(scope, version, p.epoch, p.follower!, url).then(() => {
      this.reshipAttempts.delete(key);
      this.grantDelivery(scope, version);
    }, () => this.reshipLater(key)).catch((e) => this.logger.warn({ err: e }, 'cluster: granting mirror delivery failed'));
  }

  /**
   * A failed async shipment (the follower's disk full, a refused connection) is tried again after 250 ms, doubling up
   * to 10 s, while this node is primary: otherwise the loss window and mirror delivery wait for the database's next write.
   */
  private reshipLater(key: string): void {
    if (this.closed || this.reshipTimers.has(key)) return;
    const attempt = this.reshipAttempts.get(key) ?? 0;
    this.reshipAttempts.set(key, attempt + 1);
    const timer = setTimeout(() => {
      this.reshipTimers.delete(key);
      const view = this.watch.view;
      const p = view.placements.get(key);
      const url = p?.follower == null ? undefined : view.nodes.get(p.follower);
      // No longer primary, or the follower gone: placement's next read names another and brings it in line (syncFollower).
      if (this.closed || p === undefined || url === undefined || !this.primaryHere(view, key, p)) return void this.reshipAttempts.delete(key);
      this.db.currentVersion(scopeOf(key)).then((version) => {
        if (version !== null) this.shipAsync(key, version, p, url);
        else this.reshipAttempts.delete(key); // the database is gone here
      }, () => this.reshipLater(key));
    }, Math.min(250 * 2 ** attempt, 10_000));
    timer.unref();
    this.reshipTimers.set(key, timer);
  }

  /**
   * The follower holds `version`: mirror delivery may send up to it. A follower takes over only once in line with
   * this history, so whatever a mirror received is in the next primary's change log with the same event ids.
   */
  private grantDelivery(scope: Scope, version: number): void {
    if (this.mirrors === null) return;
    const key = scopeKey(scope);
    const view = this.watch.view;
    const p = view.placements.get(key);
    if (p === undefined || !this.primaryHere(view, key, p) || this.draining.has(key)) return;
    this.granted.set(key, Math.max(version, this.granted.get(key) ?? 0));
    this.mirrors.grant(scope, version);
  }

  /** Cursors the primary shipped with its events: where this node's delivery resumes if it takes over. */
  seedCursors(key: string, cursors: Record<string, number>): void {
    this.mirrors?.seed(scopeOf(key), cursors);
  }

  /** After each read of placement: promote where this node follows a primary whose leader key is gone; replace dead followers. */
  private act(view: View): void {
    if (this.closed) return;
    for (const key of this.granted.keys()) {
      const p = view.placements.get(key);
      if (p !== undefined && this.primaryHere(view, key, p)) continue;
      this.granted.delete(key); // another node's to deliver now (a failover, a move)
      this.mirrors?.revoke(scopeOf(key));
    }
    for (const [key, p] of view.placements) {
      if (p.follower === this.id && !view.leaders.has(key)) void this.serial(key, () => this.changes.promote(key, p)).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: promotion failed'));
      // Its recorded primary, whose leader key went with a lease (a restart, a pause): back with its copy, it takes it.
      else if (p.primary === this.id && !view.leaders.has(key) && this.durableCommits && !this.retaking.has(key)) void this.serial(key, () => this.changes.retake(key, p)).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: taking a database back failed'));
      // A claim nothing was made of: no sync (a failing first write's file exists for a moment and must not be shipped), no
      // new follower (it would drop `fresh`: a dead primary's claim then waits for ever); without a live follower (strict), given back.
      else if (this.primaryHere(view, key, p) && this.claims.isUnwritten(key)) {
        if (p.follower === null ? this.config.durability === 'strict' : !view.nodes.has(p.follower)) this.claims.giveBackNow(key);
      } else if (this.primaryHere(view, key, p) && (p.follower === null || !view.nodes.has(p.follower))) void this.changes.replaceFollower(key, p, view).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: follower replacement failed'));
      else if (this.primaryHere(view, key, p) && this.followerSynced.get(key) !== followerTerm(view, p)) void this.syncFollower(key, p, view).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: bringing the follower in line failed'));
      const moveTo = view.moves.get(key);
      if (moveTo !== undefined && this.primaryHere(view, key, p) && !this.claims.isUnwritten(key)) void this.changes.handOver(key, p, view, moveTo).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: move failed (retried)'));
      // A placement naming this node primary under an epoch it has not taken up: made primary by another node's txn
      // (a move), or its own placement seen again (a rewrite of it, a restart under its old leader key). The fence
      // and the copy's connection follow at once; mirror delivery of the copy only when it was handed over.
      if (p.primary === this.id && view.leaders.get(key) === this.id && (this.highestEpoch.get(key) ?? 0) < p.epoch && !this.retaking.has(key)) this.adopt(key, p, this.handedOver(view, key, p));
    }
  }

  /**
   * A move's handover made this node primary: the one txn that wrote this placement also put the leader key on this
   * node's current lease, and it was not this node's own (a claim, promotion or retake raises the fence before its
   * read of placement, so it is not adopted). Not so when this node rewrote its own placement while primary (a new
   * follower, a move's first step: the leader key is older than the placement), nor when it restarted faster than its
   * lease TTL and found its leader key on its previous lease: its copy may then end with writes no follower holds.
   */
  private handedOver(view: View, key: string, p: Placement): boolean {
    const term = view.leaderTerms.get(key);
    return term !== undefined && term.revision === p.epoch && term.lease === this.lease.id;
  }

  /**
   * Takes up a database this node is primary of under a new epoch.
   * `handedOver`: the copy is the history the old primary handed over (it waited for this copy to hold its last
   * version, and any later primary must be in line with it), so mirrors may have all of it. Otherwise delivery is
   * granted only as the follower acknowledges (`syncFollower`, `replicated`): the copy may hold writes committed here
   * that no follower got (their clients had no 200), and a follower in line without them could take over.
   */
  private adopt(key: string, p: Placement, handedOver: boolean): void {
    // What the old primary waited for this copy to hold (its last ack here), known without opening the file.
    const held = this.mirrors === null || !handedOver ? 0 : this.copyVersions.get(key) ?? 0;
    this.highestEpoch.set(key, p.epoch);
    this.released.delete(key);
    if (held > 0) this.grantDelivery(scopeOf(key), held);
  }

  /** A follower named under a new epoch is brought in line at once, not at the next write: until then it cannot take over. */
  private async syncFollower(key: string, p: Placement, view: View): Promise<void> {
    const term = followerTerm(view, p);
    this.followerSynced.set(key, term);
    const scope = scopeOf(key);
    try {
      const version = await this.db.currentVersion(scope);
      this.shipper.resync(scope);
      if (version !== null) {
        await this.shipper.ensure(scope, version, p.epoch, p.follower!, view.nodes.get(p.follower!)!);
        this.grantDelivery(scope, version);
      }
    } catch (e) {
      if (this.followerSynced.get(key) === term) this.followerSynced.delete(key); // the next read of placement tries again
      this.logger.warn({ err: e, database: key }, 'cluster: bringing the follower in line failed');
    }
  }

  /**
   * This node's copy lacks what its follower, in line under `epoch`, holds (BehindFollower: a restored DATA_DIR): no
   * more writes or retake under that epoch here, and its leader key goes so the follower takes over at once.
   */
  private stepDown(key: string, epoch: number): void {
    if ((this.superseded.get(key) ?? -1) >= epoch) return;
    this.superseded.set(key, epoch);
    this.logger.error({ database: key, epoch }, 'cluster: this node\'s copy is older than its follower\'s (a DATA_DIR restored from a backup?): it stopped serving the database; the follower takes over');
    this.changes.giveUpLeaderKey(key, epoch).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: giving up the leader key failed; it goes with its lease'));
  }

  /** Whether this node's copy was brought in line under `epoch` (it may then take the database over). */
  inLineUnder(key: string, epoch: number): boolean {
    return this.synced.get(key) === epoch;
  }

  /** The copy was brought in line under `epoch`, at `version` (an apply, a snapshot, a confirmed handshake). */
  markSynced(key: string, epoch: number, version: number): void {
    this.synced.set(key, epoch);
    this.copyVersions.set(key, version);
    clearRestoredMark(this.db.databasePath(scopeOf(key))); // the copy is a primary's history now, restore event and all
  }

  /** Runs `work` after the database's earlier work (applies and promotion never interleave). */
  serial<T>(key: string, work: () => Promise<T> | T): Promise<T> {
    const next = (this.chains.get(key) ?? Promise.resolve()).then(work, work);
    const kept = next.catch(() => {});
    this.chains.set(key, kept);
    void kept.then(() => {
      if (this.chains.get(key) === kept) this.chains.delete(key);
    });
    return next;
  }

  /** The fence: true (and remembered) when `epoch` is at least the highest seen for the database. */
  acceptEpoch(key: string, epoch: number): boolean {
    if (epoch < (this.highestEpoch.get(key) ?? 0)) return false;
    const p = this.watch.view.placements.get(key);
    if (p && p.primary === this.id && p.epoch > epoch) return false;
    this.highestEpoch.set(key, epoch);
    return true;
  }

  /** Before this node writes a copy as a follower, its executors let go of the file (as a primary's, once). */
  async releaseCopy(key: string): Promise<void> {
    if (this.released.has(key)) return;
    await this.forgetCopy(key);
  }

  /** Before a snapshot is renamed over the copy: every executor process closes it, a follower's connections too. */
  async forgetCopy(key: string): Promise<void> {
    await this.db.forget(scopeOf(key));
    this.released.add(key);
  }

  /**
   * The longest an apply of a shipment may run (besides DB_QUERY_TIMEOUT_MS): half the lease TTL, so that the
   * primary, which waits a TTL for the answer, gets one (a snapshot is then sent instead).
   */
  get applyBudgetMs(): number {
    return (this.config.leaseTtlS * 1000) / 2;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.watch.stop();
    // Bounded: a give-back retries for up to 2 × TTL while etcd does not answer.
    await Promise.race([this.claims.giveBackIdle(), new Promise((r) => setTimeout(r, this.config.leaseTtlS * 500).unref())]);
    this.claims.close();
    if (this.keepAliveTimer) clearTimeout(this.keepAliveTimer);
    for (const timer of this.reshipTimers.values()) clearTimeout(timer);
    await this.shipper.close();
    await this.lease.revoke().catch(() => {});
    await this.etcd.close();
  }
}

/** A follower under one placement and one lease of its node (a restarted follower must be brought in line again). */
function followerTerm(view: View, p: Placement): string {
  return `${p.epoch}/${view.nodeLeases.get(p.follower!) ?? ''}`;
}
