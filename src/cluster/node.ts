// A `serve db` node in a cluster: holds a lease, claims new databases, answers only for those it is primary of
// (within its lease), ships each write to the follower before the 200, and as a follower applies what it is sent,
// fences lower epochs, and promotes itself when its primary's leader key is gone; a recorded primary back from a
// restart or a pause takes its leader key back when nobody took over.
import { existsSync } from 'node:fs';
import type { MirrorGate, Replication, Scope } from '../db/contract.ts';
import type { DbService } from '../db/service.ts';
import { ApiError } from '../shared/errors.ts';
import type { ClusterConfig } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import { Etcd } from './etcd.ts';
import { LEADER, MOVE, NODES, PLACEMENT, PlacementWatch, pollEveryMs, scopeKey, scopeOf, type Placement, type View } from './placement.ts';
import { Shipper } from './shipper.ts';
import { closeCopy, copyState } from './follower-copy.ts';
import { Claims, retrying } from './claims.ts';

/** Writes stop this long before the lease's end as this node measures it: clocks run at slightly different rates. */
const LEASE_MARGIN_MS = 250;

export class ClusterNode implements Replication {
  readonly etcd: Etcd;
  readonly watch: PlacementWatch;
  readonly id: string;
  private readonly config: ClusterConfig & { nodeId: string; advertiseUrl: string };
  private readonly db: DbService;
  readonly logger: Logger;
  readonly shipper: Shipper;
  private lease = '0';
  /** Until when this node may write as a primary: the send time of the last renewal the lease survived, plus its TTL. */
  private leaseDeadline = 0;
  private keepAliveTimer: NodeJS.Timeout | null = null;
  /** The highest epoch seen per database: anything shipped under a lower one is refused (the fence). */
  readonly highestEpoch = new Map<string, number>();
  /** Databases whose work (applies, promotion) runs one at a time, in arrival order. */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** Databases this node was refused as primary of: no more writes until placement says otherwise. */
  private readonly superseded = new Map<string, number>();
  /** Per database, the epoch under which this node's copy was last brought in line with the primary: only then may it take over. */
  private readonly synced = new Map<string, number>();
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
  private readonly claims = new Claims((key) => this.unclaim(key), (key) => existsSync(this.db.databasePath(scopeOf(key))));
  private closed = false;

  constructor(config: ClusterConfig, db: DbService, logger: Logger, token: string, mirrors: MirrorGate | null = null, { durableCommits = true }: { durableCommits?: boolean } = {}) {
    if (config.nodeId === null || config.advertiseUrl === null) throw new Error('a cluster node needs CLUSTER_NODE_ID and CLUSTER_ADVERTISE_URL');
    this.config = config as ClusterNode['config'];
    this.id = config.nodeId;
    this.db = db;
    this.logger = logger;
    this.mirrors = mirrors;
    this.durableCommits = durableCommits;
    this.etcd = new Etcd(config.etcd, Math.max(500, config.leaseTtlS * 250));
    this.watch = new PlacementWatch(this.etcd, pollEveryMs(config.leaseTtlS), (view) => this.act(view));
    this.shipper = new Shipper({ db, token, timeoutMs: config.leaseTtlS * 1000, onSuperseded: (scope) => this.superseded.set(scopeKey(scope), this.placement(scope)?.epoch ?? 0),
      cursors: mirrors ? (scope) => mirrors.cursors(scope) : undefined,
    });
  }

  async start(): Promise<void> {
    await this.renewLease(true);
    await this.watch.start();
    const every = Math.max(200, (this.config.leaseTtlS * 1000) / 4);
    const tick = () => {
      this.renewLease(false).catch((e) => this.logger.warn({ err: e }, 'cluster: lease renewal failed')).finally(() => {
        // Mirror cursors that moved without a write reach the followers too (a takeover then repeats less).
        for (const key of this.granted.keys()) this.shipper.pushCursors(scopeOf(key)).catch(() => {});
        if (!this.closed) this.keepAliveTimer = setTimeout(tick, every);
      });
    };
    this.keepAliveTimer = setTimeout(tick, every);
  }

  private async renewLease(first: boolean): Promise<void> {
    const sentAt = performance.now();
    if (!first && await this.etcd.keepAlive(this.lease)) {
      this.leaseDeadline = sentAt + this.config.leaseTtlS * 1000;
      this.mirrors?.leaseUntil(performance.timeOrigin + this.leaseDeadline - LEASE_MARGIN_MS);
      return;
    }
    // Leader keys die with the lease: no database is this node's to deliver any more.
    this.granted.clear();
    this.mirrors?.revokeAll();
    // First start, or the lease expired (a pause, etcd away): a new one. Leader keys went with the old one.
    this.lease = await this.etcd.grant(this.config.leaseTtlS);
    await this.etcd.put(`${NODES}${this.id}`, this.config.advertiseUrl, this.lease);
    this.leaseDeadline = sentAt + this.config.leaseTtlS * 1000;
    this.mirrors?.leaseUntil(performance.timeOrigin + this.leaseDeadline - LEASE_MARGIN_MS);
    if (!first) this.logger.warn('cluster: lease expired; this node rejoined with a new one');
  }

  private placement(scope: Scope): Placement | undefined {
    return this.watch.view.placements.get(scopeKey(scope));
  }

  private primaryHere(view: View, key: string, p: Placement): boolean {
    return p.primary === this.id && view.leaders.get(key) === this.id && (this.superseded.get(key) ?? -1) < p.epoch;
  }

  // Replication (src/db/contract.ts)
  async admit(scope: Scope, write: boolean): Promise<void> {
    if (!write) return this.admitHere(scope, false);
    // Counted from here to `settled`: a claim is given back only when no admitted write to the database is left.
    const key = scopeKey(scope);
    await this.claims.enter(key);
    try {
      await this.admitHere(scope, true);
    } catch (e) {
      await this.claims.leave(key);
      throw e;
    }
  }

  settled(scope: Scope): Promise<void> {
    return this.claims.leave(scopeKey(scope));
  }

  private async admitHere(scope: Scope, write: boolean): Promise<void> {
    const key = scopeKey(scope);
    let p = this.placement(scope);
    if (p === undefined) {
      p = (await this.watch.refresh()).placements.get(key);
      if (p === undefined && !write) return; // nowhere in the cluster: the local answer (not found) is the right one
      if (p === undefined) p = await this.claim(scope);
    }
    if (!this.primaryHere(this.watch.view, key, p)) throw notHere(p.primary === this.id ? 'this node\'s term as its primary ended' : `node ${p.primary} is its primary`);
    if (write && performance.now() > this.leaseDeadline - LEASE_MARGIN_MS) throw notHere('this node could not renew its lease in etcd');
    if (write && this.draining.has(key)) throw notHere(`it is moving to node ${this.watch.view.moves.get(key) ?? 'another node'}`);
  }

  async replicated(scope: Scope, version: number): Promise<void> {
    const view = this.watch.view;
    const key = scopeKey(scope);
    const p = view.placements.get(key);
    if (!p || !this.primaryHere(view, key, p)) throw notHere('this node stopped being its primary during the write');
    const url = p.follower === null ? undefined : view.nodes.get(p.follower);
    if (this.config.durability === 'async') {
      // The 200 does not wait: the follower gets the events as soon as it can (the loss window, docs/scaling.md).
      if (url !== undefined) this.shipper.ensure(scope, version, p.epoch, p.follower!, url).then(() => this.grantDelivery(scope, version), () => {});
      else if (p.follower === null) this.grantDelivery(scope, version); // no follower: no other node can take over with less
      return;
    }
    if (url === undefined) throw new ApiError('unavailable', 'the database has no live follower to confirm this write (strict durability); whether it survives a failover is unknown', { committed: null }, { 'retry-after': '1' });
    await this.shipper.ensure(scope, version, p.epoch, p.follower!, url);
    this.grantDelivery(scope, version);
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

  /** A database seen for the first time: this node becomes its primary, the least-loaded other live node its follower. */
  private async claim(scope: Scope): Promise<Placement> {
    const key = scopeKey(scope);
    const follower = this.pickFollower(this.watch.view, [this.id]);
    if (follower === null && this.config.durability === 'strict') throw new ApiError('unavailable', 'no other cluster node is alive to follow a new database (strict durability)', { committed: false }, { 'retry-after': '1' });
    const value = JSON.stringify({ primary: this.id, follower, fresh: true }); // nothing written yet (see promote)
    const r = await this.etcd.txn([{ key: `${PLACEMENT}${key}`, absent: true }, { key: `${LEADER}${key}`, absent: true }],
      [{ put: `${PLACEMENT}${key}`, value }, { put: `${LEADER}${key}`, value: this.id, lease: this.lease }]);
    const view = await this.watch.refresh();
    const p = view.placements.get(key);
    if (!p) throw notHere('its placement is being decided');
    if (r.succeeded) {
      this.highestEpoch.set(key, p.epoch);
      this.claims.claimed(key);
    }
    return p;
  }

  /**
   * Gives back the claim of a database nothing was made of (Claims.leave: no admitted write is left, and writes that
   * come meanwhile wait for this). Until a read of placement after the txn, the old placement admits nothing here
   * (`superseded`), so no write can land on this node once the key is gone; the writes that waited are admitted afresh.
   */
  private async unclaim(key: string): Promise<void> {
    const p = this.placement(scopeOf(key));
    if (p === undefined || !this.primaryHere(this.watch.view, key, p)) return;
    this.superseded.set(key, p.epoch);
    const until = performance.now() + this.config.leaseTtlS * 2000;
    // Only while the placement is the one this node read: no promotion or move since, and the leader key is this
    // node's or gone with its lease (every txn that names another leader rewrites the placement too).
    const done = await retrying(() => this.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }], [{ delete: `${PLACEMENT}${key}` }, { delete: `${LEADER}${key}` }, { delete: `${MOVE}${key}` }]), until);
    const view = done === undefined ? undefined : await retrying(() => this.watch.refresh(), until);
    // Outcome unknown (etcd away): the placement stays refused here; a later claim has a higher epoch.
    if (view === undefined) return void this.logger.warn({ database: key }, 'cluster: giving back an unused placement failed (etcd did not answer)');
    const now = view.placements.get(key);
    if (this.superseded.get(key) === p.epoch) this.superseded.delete(key);
    if (now?.epoch === p.epoch && this.primaryHere(view, key, now)) this.claims.claimed(key); // still ours: the next failed write tries again
    if (now !== undefined) return;
    this.highestEpoch.delete(key);
    this.followerSynced.delete(key);
    this.synced.delete(key);
    this.logger.info({ database: key }, 'cluster: a new database\'s first writes failed; its placement was given back');
  }

  private pickFollower(view: View, exclude: string[]): string | null {
    const load = new Map<string, number>();
    for (const id of view.nodes.keys()) if (!exclude.includes(id)) load.set(id, 0);
    for (const p of view.placements.values()) for (const n of [p.primary, p.follower]) if (n !== null && load.has(n)) load.set(n, load.get(n)! + 1);
    return [...load].sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))[0]?.[0] ?? null;
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
      if (p.follower === this.id && !view.leaders.has(key)) void this.serial(key, () => this.promote(key, p)).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: promotion failed'));
      // Its recorded primary, whose leader key went with a lease (a restart, a pause): back with its copy, it takes it.
      else if (p.primary === this.id && !view.leaders.has(key) && !this.retaking.has(key)) void this.serial(key, () => this.retake(key, p)).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: taking a database back failed'));
      else if (this.primaryHere(view, key, p) && (p.follower === null || !view.nodes.has(p.follower))) void this.replaceFollower(key, p, view).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: follower replacement failed'));
      // Not while its first write runs: a file it makes and removes on failure must not reach the follower.
      else if (this.primaryHere(view, key, p) && this.followerSynced.get(key) !== followerTerm(view, p) && !this.claims.isUnwritten(key)) void this.syncFollower(key, p, view);
      const moveTo = view.moves.get(key);
      if (moveTo !== undefined && this.primaryHere(view, key, p)) void this.handOver(key, p, view, moveTo).catch((e) => this.logger.warn({ err: e, database: key }, 'cluster: move failed (retried)'));
      // Made primary by another node's txn (a move): the fence and the copy's connection follow at once.
      if (p.primary === this.id && view.leaders.get(key) === this.id && (this.highestEpoch.get(key) ?? 0) < p.epoch && !this.retaking.has(key)) this.adopt(key, p);
    }
  }

  /** Takes up a database made primary here by another node's txn; a failure is logged and tried at the next read. */
  private adopt(key: string, p: Placement): void {
    try {
      const path = this.db.databasePath(scopeOf(key));
      const held = this.mirrors === null ? 0 : copyState(path).version; // before any write here: all of it is the handed-over history
      closeCopy(path);
      this.highestEpoch.set(key, p.epoch);
      this.released.delete(key);
      if (held > 0) this.grantDelivery(scopeOf(key), held);
    } catch (e) {
      this.logger.warn({ err: e, database: key }, 'cluster: taking up a moved database failed (tried again at the next read)');
    }
  }

  /**
   * A live move (docs/scaling.md): the target becomes the follower and is brought in line; then writes stop here,
   * the last ones reach it, and one txn makes it primary (with its own lease on the leader key) and this node its follower.
   */
  private async handOver(key: string, p: Placement, view: View, target: string): Promise<void> {
    const targetLease = view.nodeLeases.get(target);
    if (this.draining.has(key) || target === this.id || targetLease === undefined) return;
    const current = [{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, value: this.id }];
    if (p.follower !== target) {
      await this.etcd.txn(current, [{ put: `${PLACEMENT}${key}`, value: JSON.stringify({ primary: this.id, follower: target }) }]);
      this.logger.warn({ database: key, to: target }, 'cluster: move: the target is the follower now');
      return; // the next read of placement brings it in line (syncFollower)
    }
    this.draining.add(key);
    const scope = scopeOf(key);
    // Delivery stops here first, so the cursors the target gets are the last ones (a failed handover grants again).
    const grantedUpTo = this.granted.get(key);
    this.granted.delete(key);
    this.mirrors?.revoke(scope);
    let handedOver = false;
    try {
      await new Promise((r) => setTimeout(r, 50)); // writes admitted before the drain commit and ship meanwhile; delivery's last acks are saved
      const version = await this.db.currentVersion(scope);
      if (version !== null) await this.shipper.ensure(scope, version, p.epoch, target, view.nodes.get(target)!);
      await this.shipper.pushCursors(scope).catch(() => {}); // fewer repeats, not needed for correctness
      const r = await this.etcd.txn(current, [
        { put: `${PLACEMENT}${key}`, value: JSON.stringify({ primary: target, follower: this.id }) },
        { put: `${LEADER}${key}`, value: target, lease: targetLease },
        { delete: `${MOVE}${key}` },
      ]);
      handedOver = r.succeeded;
      if (r.succeeded) this.logger.warn({ database: key, to: target, version }, 'cluster: move: handed over');
      await this.watch.refresh();
    } finally {
      this.draining.delete(key);
      if (!handedOver && grantedUpTo !== undefined) this.grantDelivery(scope, grantedUpTo);
    }
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

  markSynced(key: string, epoch: number): void {
    this.synced.set(key, epoch);
  }

  /**
   * Only the recorded follower may take over, only while the placement it read is still the current one, and only
   * when its copy was brought in line under that placement (a follower just named has nothing yet: taking over
   * would lose acknowledged writes, so the database waits for its primary instead) — or when nothing was ever
   * written to it: a `fresh` placement (a claim, or a takeover of one) whose follower holds no copy. Every write
   * acknowledged under it was acknowledged by this follower, which leaves a file here; none means none was (strict
   * durability; async loses what was never shipped, its window). Without this, a claim whose primary lost its lease
   * before its first write reached the follower answered 503 for ever: its primary, back, holds no leader key.
   */
  private async promote(key: string, p: Placement): Promise<void> {
    if (performance.now() > this.leaseDeadline - LEASE_MARGIN_MS) return;
    const path = this.db.databasePath(scopeOf(key));
    const unwritten = this.synced.get(key) !== p.epoch && p.fresh === true && !existsSync(path); // snapshots install in this chain
    if (this.synced.get(key) !== p.epoch && !unwritten) return;
    // What the copy holds now (applies wait in this chain): any later primary must be brought in line with it first.
    const held = this.mirrors === null ? 0 : copyState(path).version;
    const follower = this.pickFollower(this.watch.view, [this.id, p.primary]);
    const value = JSON.stringify({ primary: this.id, follower, ...(unwritten ? { fresh: true } : {}) });
    const r = await this.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, absent: true }],
      [{ put: `${PLACEMENT}${key}`, value }, { put: `${LEADER}${key}`, value: this.id, lease: this.lease }]);
    if (!r.succeeded) return;
    this.highestEpoch.set(key, r.revision); // before any later apply in this chain: the old primary's are refused from here
    this.released.delete(key);
    closeCopy(this.db.databasePath(scopeOf(key))); // the executors write it from now on
    this.logger.warn({ database: key, epoch: r.revision, from: p.primary, unwritten }, 'cluster: promoted to primary');
    await this.watch.refresh();
    if (held > 0) this.grantDelivery(scopeOf(key), held);
  }

  /**
   * The recorded primary takes its leader key back: placement still names it primary (no promotion, move or claim
   * since: each of those rewrites the placement) and nobody holds the key. Needed when its follower cannot take over
   * — one named or restarted since it was last brought in line holds nothing acknowledged under this placement — or
   * the database waited for ever (the primary, back, found no leader key of its own and the follower may not promote).
   * Its copy holds every acknowledged write: this node was the only writer under the placement, every write it
   * acknowledged committed here first (on disk: DB_SYNC=full), and it began the placement with a copy in line (a
   * claim, a promotion, a move's handover). Without its copy (a lost disk) it takes nothing. The txn's conditions are
   * the promotion's, so at most one of the two succeeds; it rewrites the placement (same follower) for a new epoch:
   * anything in flight under the old one is refused, the follower must be brought in line again (syncFollower, at
   * the next read) before it could take over, and the copy's unacknowledged tail is never granted to mirrors here
   * (`retaking` keeps `adopt` away; delivery is granted after the follower acknowledges, as for any write).
   */
  private async retake(key: string, p: Placement): Promise<void> {
    if (!this.durableCommits || performance.now() > this.leaseDeadline - LEASE_MARGIN_MS) return;
    const path = this.db.databasePath(scopeOf(key));
    if (!existsSync(path)) return;
    const view = this.watch.view; // this chain's work may have run after a newer read
    const now = view.placements.get(key);
    if (now?.epoch !== p.epoch || view.leaders.has(key)) return;
    this.retaking.add(key);
    try {
      const value = JSON.stringify({ primary: this.id, follower: p.follower, ...(p.fresh === true ? { fresh: true } : {}) });
      const r = await this.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, absent: true }],
        [{ put: `${PLACEMENT}${key}`, value }, { put: `${LEADER}${key}`, value: this.id, lease: this.lease }]);
      if (!r.succeeded) return;
      this.highestEpoch.set(key, r.revision);
      this.released.delete(key);
      closeCopy(path); // a follower's handshake may have opened it here; the executors write it
      this.logger.warn({ database: key, epoch: r.revision, from: p.epoch }, 'cluster: took its database back as its recorded primary');
    } finally {
      this.retaking.delete(key);
    }
    await this.watch.refresh();
  }

  private async replaceFollower(key: string, p: Placement, view: View): Promise<void> {
    const follower = this.pickFollower(view, [this.id]);
    if (follower === null || follower === p.follower) return;
    await this.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, value: this.id }],
      [{ put: `${PLACEMENT}${key}`, value: JSON.stringify({ primary: this.id, follower }) }]);
    this.logger.warn({ database: key, follower }, 'cluster: new follower');
    await this.watch.refresh();
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
    if (this.keepAliveTimer) clearTimeout(this.keepAliveTimer);
    await this.shipper.close();
    await this.etcd.revoke(this.lease).catch(() => {});
    await this.etcd.close();
  }
}

/** A follower under one placement and one lease of its node (a restarted follower must be brought in line again). */
function followerTerm(view: View, p: Placement): string {
  return `${p.epoch}/${view.nodeLeases.get(p.follower!) ?? ''}`;
}

function notHere(why: string): ApiError {
  return new ApiError('unavailable', `this node does not serve this database now (${why}); nothing ran, retry after a second`, { committed: false }, { 'retry-after': '1' });
}
