// The txns by which this node takes or gives back a database's placement (claim, give-back, promotion, retake, new follower, handover): each is conditioned on the placement it read, so there are never two writers.
import { existsSync } from 'node:fs';
import type { MirrorGate, Scope } from '../db/contract.ts';
import type { DbService } from '../db/service.ts';
import { ApiError } from '../shared/errors.ts';
import type { ClusterConfig } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import type { Etcd } from './etcd.ts';
import type { NodeLease } from './lease.ts';
import { databasesIn, LEADER, MOVE, PLACEMENT, scopeOf, type Placement, type PlacementWatch, type View } from './placement.ts';
import { Superseded, type Shipper } from './shipper.ts';
import { GIVE_BACK_IDLE_MS, retrying, UNWRITTEN_PER_REPO, type Claims } from './claims.ts';

/** What the changes read and mark on their node: ClusterNode's own state, shared by reference. */
export interface PlacementHost {
  readonly id: string;
  readonly config: ClusterConfig;
  readonly db: DbService;
  readonly etcd: Etcd;
  readonly watch: PlacementWatch;
  readonly lease: NodeLease;
  readonly logger: Logger;
  readonly shipper: Shipper;
  readonly mirrors: MirrorGate | null;
  readonly claims: Claims;
  /** DB_MAX_DATABASES_PER_REPO: checked against placement before a claim, so a repo at it costs etcd nothing. */
  readonly maxDatabasesPerRepo: number;
  /** This node's COMMITs are on its disk before they ship (DB_SYNC=full): only then may it take a database back. */
  readonly durableCommits: boolean;
  readonly highestEpoch: Map<string, number>;
  readonly superseded: Map<string, number>;
  readonly synced: Map<string, number>;
  readonly copyVersions: Map<string, number>;
  readonly followerSynced: Map<string, string>;
  readonly draining: Set<string>;
  readonly released: Set<string>;
  readonly granted: Map<string, number>;
  readonly retaking: Set<string>;
  primaryHere(view: View, key: string, p: Placement): boolean;
  grantDelivery(scope: Scope, version: number): void;
}

export class PlacementChanges {
  private readonly node: PlacementHost;
  /** Claims whose txn is under way: requests for the same new database share it. */
  private readonly claiming = new Map<string, Promise<Placement>>();

  constructor(node: PlacementHost) {
    this.node = node;
  }

  /**
   * A database seen for the first time: this node becomes its primary, the least-loaded other live node its follower.
   * Refused before any txn past SPEC 4.8's limit (counted over the cluster) or UNWRITTEN_PER_REPO; requests for the
   * same name meanwhile share the one txn.
   */
  claim(scope: Scope, key: string): Promise<Placement> {
    const under = this.claiming.get(key);
    if (under !== undefined) return under;
    const n = this.node;
    const max = n.maxDatabasesPerRepo;
    if (databasesIn(n.watch.view, scope.org, scope.repo) >= max) throw new ApiError('quota_exceeded', `the repo already has ${max === 1 ? '1 database' : `${max} databases`} (DB_MAX_DATABASES_PER_REPO)`);
    if (!n.claims.reserve(key)) {
      throw new ApiError('rate_limited', `this repo has ${UNWRITTEN_PER_REPO} new databases on this node whose first write has not succeeded yet (a failed one's name is freed after ${GIVE_BACK_IDLE_MS / 1000} s without writes); nothing ran, retry after a second`, { committed: false }, { 'retry-after': '1' });
    }
    const claiming = this.claimOnce(key).finally(() => this.claiming.delete(key));
    this.claiming.set(key, claiming);
    return claiming;
  }

  private async claimOnce(key: string): Promise<Placement> {
    const n = this.node;
    let succeeded: boolean | undefined = false; // undefined: sent, outcome unknown (etcd did not answer)
    try {
      const follower = pickFollower(n.watch.view, [n.id]);
      if (follower === null && n.config.durability === 'strict') throw new ApiError('unavailable', 'no other cluster node is alive to follow a new database (strict durability)', { committed: false }, { 'retry-after': '1' });
      const value = JSON.stringify({ primary: n.id, follower, fresh: true }); // nothing written yet (see promote)
      succeeded = undefined;
      const r = await n.etcd.txn([{ key: `${PLACEMENT}${key}`, absent: true }, { key: `${LEADER}${key}`, absent: true }],
        [{ put: `${PLACEMENT}${key}`, value }, { put: `${LEADER}${key}`, value: n.id, lease: n.lease.id }]);
      succeeded = r.succeeded;
      if (r.succeeded) raiseFence(n, key, r.revision); // its own placement: not adopted as a handed-over one
    } finally {
      // Before any read shows the placement: unwritten, it gets no follower sync or replacement. An unknown outcome
      // counts as claimed, so a claim that did apply is given back too (unclaim does nothing for another node's).
      n.claims.claimed(key, succeeded !== false);
    }
    const view = await n.watch.refresh();
    const p = view.placements.get(key);
    if (!p) throw notHere('its placement is being decided');
    if (succeeded === true) n.highestEpoch.set(key, p.epoch);
    return p;
  }

  /**
   * Gives back the claim of a database nothing was made of (Claims.leave: no admitted write is left, and writes that
   * come meanwhile wait for this). Until a read of placement after the txn, the old placement admits nothing here
   * (`superseded`), so no write can land on this node once the key is gone; the writes that waited are admitted afresh.
   */
  async unclaim(key: string): Promise<void> {
    const n = this.node;
    const p = n.watch.view.placements.get(key);
    // Its own earlier give-back may have marked the epoch superseded (its outcome unknown): tried again as ours.
    if (p === undefined || p.primary !== n.id || n.watch.view.leaders.get(key) !== n.id || (n.superseded.get(key) ?? -1) > p.epoch) return;
    n.superseded.set(key, p.epoch);
    const until = performance.now() + n.config.leaseTtlS * 2000;
    // Only while the placement is the one this node read: no promotion or move since, and the leader key is this
    // node's or gone with its lease (every txn that names another leader rewrites the placement too).
    const done = await retrying(() => n.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }], [{ delete: `${PLACEMENT}${key}` }, { delete: `${LEADER}${key}` }, { delete: `${MOVE}${key}` }]), until);
    const view = done === undefined ? undefined : await retrying(() => n.watch.refresh(), until);
    if (view === undefined) {
      // Outcome unknown (etcd away): refused here meanwhile, and tried again once idle (the same txn: applied already, it fails).
      n.claims.claimed(key);
      return void n.logger.warn({ database: key }, 'cluster: giving back an unused placement failed (etcd did not answer); tried again later');
    }
    const now = view.placements.get(key);
    if (n.superseded.get(key) === p.epoch) n.superseded.delete(key);
    // Still this node's (the txn did not apply: the view it read was stale), nothing made: given back later, so no
    // claim is left with no file and no give-back to come.
    if (now !== undefined && n.primaryHere(view, key, now) && !existsSync(n.db.databasePath(scopeOf(key)))) n.claims.claimed(key);
    if (now !== undefined) return;
    n.highestEpoch.delete(key);
    n.followerSynced.delete(key);
    n.synced.delete(key);
    n.copyVersions.delete(key);
    n.logger.info({ database: key }, 'cluster: a new database\'s first writes failed; its placement was given back');
  }

  /**
   * A live move (docs/scaling.md): the target becomes the follower and is brought in line; then writes stop here,
   * the last ones reach it, and one txn makes it primary (with its own lease on the leader key) and this node its follower.
   */
  async handOver(key: string, p: Placement, view: View, target: string): Promise<void> {
    const n = this.node;
    const targetLease = view.nodeLeases.get(target);
    if (n.draining.has(key) || target === n.id || targetLease === undefined) return;
    const current = [{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, value: n.id }];
    if (p.follower !== target) {
      const r = await n.etcd.txn(current, [{ put: `${PLACEMENT}${key}`, value: JSON.stringify({ primary: n.id, follower: target }) }]);
      if (r.succeeded) raiseFence(n, key, r.revision); // still primary: delivery waits for the target's acks (not adopted)
      n.logger.warn({ database: key, to: target }, 'cluster: move: the target is the follower now');
      return; // the next read of placement brings it in line (syncFollower)
    }
    n.draining.add(key);
    const scope = scopeOf(key);
    // Delivery stops here first, so the cursors the target gets are the last ones (a failed handover grants again).
    const grantedUpTo = n.granted.get(key);
    n.granted.delete(key);
    n.mirrors?.revoke(scope);
    let handedOver = false;
    try {
      await new Promise((r) => setTimeout(r, 50)); // writes admitted before the drain commit and ship meanwhile; delivery's last acks are saved
      const version = await n.db.currentVersion(scope);
      if (version !== null) await n.shipper.ensure(scope, version, p.epoch, target, view.nodes.get(target)!);
      await n.shipper.pushCursors(scope).catch(() => {}); // fewer repeats, not needed for correctness
      const r = await n.etcd.txn(current, [
        { put: `${PLACEMENT}${key}`, value: JSON.stringify({ primary: target, follower: n.id }) },
        { put: `${LEADER}${key}`, value: target, lease: targetLease },
        { delete: `${MOVE}${key}` },
      ]);
      handedOver = r.succeeded;
      if (r.succeeded) n.logger.warn({ database: key, to: target, version }, 'cluster: move: handed over');
      await n.watch.refresh();
    } finally {
      n.draining.delete(key);
      if (!handedOver && grantedUpTo !== undefined) n.grantDelivery(scope, grantedUpTo);
    }
  }

  /**
   * Only the recorded follower may take over, only while the placement it read is still the current one, and only
   * when its copy was brought in line under that placement (a follower just named has nothing yet: taking over
   * would lose acknowledged writes, so the database waits for its primary instead) — or when nothing was ever
   * written to it: a `fresh` placement (a claim, or a takeover of one) whose follower holds no copy. Every write
   * acknowledged under it was acknowledged by this follower, which leaves a file here; none means none was (strict
   * durability; async loses what was never shipped, its window) — if this node has not rejoined since the placement
   * was written: a follower back with an empty or new DATA_DIR also holds no file, and taking over would then lose
   * every acknowledged write (`fresh` stays until the follower changes). Without this, a claim whose primary lost its
   * lease before its first write reached the follower answered 503 for ever: its primary, back, holds no leader key.
   */
  async promote(key: string, p: Placement): Promise<void> {
    const n = this.node;
    if (n.lease.lapsed()) return;
    const path = n.db.databasePath(scopeOf(key));
    const unwritten = n.synced.get(key) !== p.epoch && p.fresh === true && n.lease.joinedAt < p.epoch && !existsSync(path); // snapshots install in this chain
    if (n.synced.get(key) !== p.epoch && !unwritten) return;
    // What the copy held when last brought in line (applies wait in this chain; no file is opened on this event loop).
    const held = n.mirrors === null || unwritten ? 0 : n.copyVersions.get(key) ?? 0;
    const follower = pickFollower(n.watch.view, [n.id, p.primary]);
    const r = await this.takeLeaderKey(key, p, { primary: n.id, follower, ...(unwritten ? { fresh: true } : {}) });
    if (!r.succeeded) return;
    n.highestEpoch.set(key, r.revision); // before any later apply in this chain: the old primary's are refused from here
    n.released.delete(key);
    if (unwritten) n.claims.claimed(key); // still nothing of it: given back here once idle, as its claimer would have
    n.logger.warn({ database: key, epoch: r.revision, from: p.primary, unwritten }, 'cluster: promoted to primary');
    await n.watch.refresh();
    if (held > 0) n.grantDelivery(scopeOf(key), held);
  }

  /**
   * The recorded primary takes its leader key back: placement still names it primary (no promotion, move or claim
   * since: each of those rewrites the placement) and nobody holds the key. Needed when its follower cannot take over
   * — one named or restarted since it was last brought in line holds nothing acknowledged under this placement — or
   * the database waited for ever (the primary, back, found no leader key of its own and the follower may not promote).
   * Its copy holds every acknowledged write: this node was the only writer under the placement, every write it
   * acknowledged committed here first (on disk: DB_SYNC=full), and it began the placement with a copy in line (a
   * claim, a promotion, a move's handover) — unless its DATA_DIR was restored from a backup since: so a live follower
   * in line under the placement, which may take over itself, is left to (asked first), and a copy found older than
   * the follower's (stepDown) takes nothing. Without its copy (a lost disk) it takes nothing. The txn's conditions are
   * the promotion's, so at most one of the two succeeds; it rewrites the placement (same follower) for a new epoch:
   * anything in flight under the old one is refused, the follower must be brought in line again (syncFollower, at
   * the next read) before it could take over, and the copy's unacknowledged tail is never granted to mirrors here
   * (`retaking` keeps `adopt` away; delivery is granted after the follower acknowledges, as for any write).
   */
  async retake(key: string, p: Placement): Promise<void> {
    const n = this.node;
    if (!n.durableCommits || n.lease.lapsed()) return;
    const path = n.db.databasePath(scopeOf(key));
    if (!existsSync(path)) return;
    const view = n.watch.view; // this chain's work may have run after a newer read
    const now = view.placements.get(key);
    if (now?.epoch !== p.epoch || view.leaders.has(key)) return;
    if ((n.superseded.get(key) ?? -1) >= p.epoch) return; // its copy was found older than the follower's (stepDown)
    // A follower in line under this placement holds every acknowledged write and takes over itself: this copy may
    // not (a DATA_DIR restored from a backup). One that does not answer is asked again at the next read.
    const followerUrl = p.follower === null ? undefined : view.nodes.get(p.follower);
    n.retaking.add(key); // also keeps reads of placement from queueing more retakes while the follower is asked
    try {
      if (followerUrl !== undefined && await this.followerCanTakeOver(key, p, followerUrl)) return;
      const r = await this.takeLeaderKey(key, p, { primary: n.id, follower: p.follower, ...(p.fresh === true ? { fresh: true } : {}) });
      if (!r.succeeded) return;
      n.highestEpoch.set(key, r.revision);
      n.released.delete(key);
      n.logger.warn({ database: key, epoch: r.revision, from: p.epoch }, 'cluster: took its database back as its recorded primary');
    } finally {
      n.retaking.delete(key);
    }
    await n.watch.refresh();
  }

  private async followerCanTakeOver(key: string, p: Placement, url: string): Promise<boolean> {
    try {
      return await this.node.shipper.followerInLine(scopeOf(key), p.epoch, url);
    } catch (e) {
      if (e instanceof Superseded) return true; // it knows a newer epoch: this view is stale, nothing to take
      throw e;
    }
  }

  /**
   * Deletes this node's leader key of `epoch`'s placement (still current, the key still naming this node), so the
   * follower in line takes over at its next read rather than after the key's lease (stepDown).
   */
  async giveUpLeaderKey(key: string, epoch: number): Promise<void> {
    const n = this.node;
    await n.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: epoch }, { key: `${LEADER}${key}`, value: n.id }], [{ delete: `${LEADER}${key}` }]);
    await n.watch.refresh();
  }

  async replaceFollower(key: string, p: Placement, view: View): Promise<void> {
    const n = this.node;
    const follower = pickFollower(view, [n.id]);
    if (follower === null || follower === p.follower) return;
    const r = await n.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, value: n.id }],
      [{ put: `${PLACEMENT}${key}`, value: JSON.stringify({ primary: n.id, follower }) }]);
    if (r.succeeded) {
      raiseFence(n, key, r.revision); // still primary: delivery waits for the new follower's acks (not adopted)
      n.logger.warn({ database: key, follower }, 'cluster: new follower');
    }
    await n.watch.refresh();
  }

  /** Promotion's and retake's one txn: placement `p` still current and nobody's leader key, so at most one of them succeeds. */
  private takeLeaderKey(key: string, p: Placement, placement: { primary: string; follower: string | null; fresh?: true }) {
    const n = this.node;
    return n.etcd.txn([{ key: `${PLACEMENT}${key}`, modRevision: p.epoch }, { key: `${LEADER}${key}`, absent: true }],
      [{ put: `${PLACEMENT}${key}`, value: JSON.stringify(placement) }, { put: `${LEADER}${key}`, value: n.id, lease: n.lease.id }]);
  }
}

/**
 * After a txn of this node's own that rewrote a placement naming it primary: the fence follows at once, so its read
 * of placement does not take the new epoch for a database another node handed over (ClusterNode.adopt).
 */
function raiseFence(n: PlacementHost, key: string, revision: number): void {
  if ((n.highestEpoch.get(key) ?? 0) < revision) n.highestEpoch.set(key, revision);
}

/** The live node, not excluded, with the fewest placements (primaries and followers), ties by id. */
function pickFollower(view: View, exclude: string[]): string | null {
  const load = new Map<string, number>();
  for (const id of view.nodes.keys()) if (!exclude.includes(id)) load.set(id, 0);
  for (const p of view.placements.values()) for (const n of [p.primary, p.follower]) if (n !== null && load.has(n)) load.set(n, load.get(n)! + 1);
  return [...load].sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]))[0]?.[0] ?? null;
}

export function notHere(why: string): ApiError {
  return new ApiError('unavailable', `this node does not serve this database now (${why}); nothing ran, retry after a second`, { committed: false }, { 'retry-after': '1' });
}
