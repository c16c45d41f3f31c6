// Placement as etcd holds it, read as one view: live nodes, each database's {primary, follower, epoch}, and whose
// leader key (held by the primary's lease) exists. Polled, so every reader sees one revision (DESIGN.md says why).
import { createHash } from 'node:crypto';
import type { Scope } from '../db/contract.ts';
import type { Etcd, KeyValue } from './etcd.ts';

export const ROOT = '/scopebase/';
export const NODES = `${ROOT}nodes/`;
export const PLACEMENT = `${ROOT}placement/`;
export const LEADER = `${ROOT}leader/`;
/** A requested live move: database key → the node it should be primary on (the primary carries it out). */
export const MOVE = `${ROOT}move/`;

/** How often placement is read: a twentieth of the lease TTL, 100 to 500 ms (failover waits for one read). */
export function pollEveryMs(leaseTtlS: number): number {
  return Math.min(500, Math.max(100, leaseTtlS * 50));
}

/** Reads made for requests naming a database the view lacks begin at most this often per process, shared by them all. */
export const LOOKUP_GAP_MS = 50;

export interface Placement {
  primary: string;
  follower: string | null;
  /** The etcd revision that wrote this placement: the fencing token shipped with every change. */
  epoch: number;
  /**
   * Written by a claim, or by the promotion of a follower that held no copy: no write had been acknowledged when it
   * was written, so one acknowledged since is in this follower's copy (see PlacementChanges.promote).
   */
  fresh?: boolean;
}

export interface View {
  revision: number;
  /** Live nodes (their lease holds the key) and where they are reached. */
  nodes: Map<string, string>;
  /** Each live node's lease: a new one means the node restarted (and forgot what it held in memory). */
  nodeLeases: Map<string, string>;
  placements: Map<string, Placement>;
  /** Database key → the node whose lease holds its leader key. */
  leaders: Map<string, string>;
  /**
   * Database key → the lease holding its leader key and the revision that last wrote it: equal to the placement's
   * epoch when one txn wrote both (a claim, promotion, retake or handover), older when the primary only rewrote its
   * placement (a new follower, a move's first step); a lease the named node no longer renews after it restarted.
   */
  leaderTerms: Map<string, { lease: string; revision: number }>;
  moves: Map<string, string>;
}

export function scopeKey(scope: Scope): string {
  return `${scope.org}/${scope.repo}/${scope.database}`;
}

const perRepo = new WeakMap<View, Map<string, number>>();

/** How many databases `org/repo` has placed in the cluster as `view` shows it (counted once per view). */
export function databasesIn(view: View, org: string, repo: string): number {
  let counts = perRepo.get(view);
  if (counts === undefined) {
    counts = new Map();
    for (const key of view.placements.keys()) {
      const repoKey = key.slice(0, key.lastIndexOf('/'));
      counts.set(repoKey, (counts.get(repoKey) ?? 0) + 1);
    }
    perRepo.set(view, counts);
  }
  return counts.get(`${org}/${repo}`) ?? 0;
}

export function scopeOf(key: string): Scope {
  const [org, repo, database] = key.split('/') as [string, string, string];
  return { org, repo, database };
}

/**
 * Where a database not placed yet should live: the live node with the fewest primaries (placements in `view`, plus
 * `extra` — databases sent to a node but not in the view yet). Ties go to the node ranked first for this name by
 * rendezvous hashing, so proxies with the same view agree, and the spread holds when nodes come and go.
 */
export function leastLoaded(view: View, key: string, extra: Iterable<string> | ReadonlyMap<string, number> = []): string | null {
  const load = new Map(primariesPerNode(view));
  const more = extra instanceof Map ? extra : countOf(extra as Iterable<string>);
  for (const [id, n] of more) if (load.has(id)) load.set(id, load.get(id)! + n);
  let best: { id: string; load: number; rank: number } | null = null;
  for (const [id, n] of load) {
    if (best !== null && n > best.load) continue;
    const rank = createHash('sha256').update(`${key}\n${id}`).digest().readUInt32BE(0);
    if (best === null || n < best.load || rank > best.rank || (rank === best.rank && id < best.id)) best = { id, load: n, rank };
  }
  return best?.id ?? null;
}

/** Primaries per live node, counted once per view (a view is replaced, never changed): not per new database. */
const primaryCounts = new WeakMap<View, ReadonlyMap<string, number>>();
function primariesPerNode(view: View): ReadonlyMap<string, number> {
  let counts = primaryCounts.get(view);
  if (counts === undefined) {
    const load = new Map<string, number>([...view.nodes.keys()].map((id) => [id, 0]));
    for (const p of view.placements.values()) if (load.has(p.primary)) load.set(p.primary, load.get(p.primary)! + 1);
    primaryCounts.set(view, (counts = load));
  }
  return counts;
}

/** Each repo's placed databases, sorted, listed once per view (a `status` then costs no scan of every placement). */
const repoDatabases = new WeakMap<View, ReadonlyMap<string, string[]>>();
export function databasesOf(view: View, org: string, repo: string): string[] {
  let byRepo = repoDatabases.get(view);
  if (byRepo === undefined) {
    const lists = new Map<string, string[]>();
    for (const key of view.placements.keys()) {
      const cut = key.lastIndexOf('/');
      const list = lists.get(key.slice(0, cut));
      if (list) list.push(key.slice(cut + 1));
      else lists.set(key.slice(0, cut), [key.slice(cut + 1)]);
    }
    for (const list of lists.values()) list.sort();
    repoDatabases.set(view, (byRepo = lists));
  }
  return [...(byRepo.get(`${org}/${repo}`) ?? [])];
}

function countOf(ids: Iterable<string>): Map<string, number> {
  const counts = new Map<string, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  return counts;
}

function parse(revision: number, kvs: KeyValue[]): View {
  const view: View = { revision, nodes: new Map(), nodeLeases: new Map(), placements: new Map(), leaders: new Map(), leaderTerms: new Map(), moves: new Map() };
  for (const kv of kvs) {
    if (kv.key.startsWith(NODES)) {
      view.nodes.set(kv.key.slice(NODES.length), kv.value);
      view.nodeLeases.set(kv.key.slice(NODES.length), kv.lease);
    }
    else if (kv.key.startsWith(LEADER)) {
      view.leaders.set(kv.key.slice(LEADER.length), kv.value);
      view.leaderTerms.set(kv.key.slice(LEADER.length), { lease: kv.lease, revision: kv.modRevision });
    }
    else if (kv.key.startsWith(MOVE)) view.moves.set(kv.key.slice(MOVE.length), kv.value);
    else if (kv.key.startsWith(PLACEMENT)) {
      try {
        const p = JSON.parse(kv.value) as { primary: string; follower: string | null; fresh?: boolean };
        view.placements.set(kv.key.slice(PLACEMENT.length), { primary: p.primary, follower: p.follower ?? null, epoch: kv.modRevision, fresh: p.fresh === true });
      } catch { /* not ours: ignored */ }
    }
  }
  return view;
}

/** Keeps the newest view; `onView` runs after each read. A failed read keeps the last view (its age says how stale). */
export class PlacementWatch {
  view: View = { revision: 0, nodes: new Map(), nodeLeases: new Map(), placements: new Map(), leaders: new Map(), leaderTerms: new Map(), moves: new Map() };
  /** When the view was last read successfully (performance.now()). */
  readAt = 0;
  private timer: NodeJS.Timeout | null = null;
  private reading: Promise<View> | null = null;
  /** The read that follows the one under way, for callers that came during it. */
  private after: Promise<View> | null = null;
  /** The lookup requests are waiting for (`lookup`), and when the last read began. */
  private lookingUp: Promise<View> | null = null;
  private readStartedAt = -Infinity;
  private readonly etcd: Etcd;
  private readonly everyMs: number;
  private readonly onView: (view: View) => void | Promise<void>;

  constructor(etcd: Etcd, everyMs: number, onView: (view: View) => void | Promise<void> = () => {}) {
    this.etcd = etcd;
    this.everyMs = everyMs;
    this.onView = onView;
  }

  start(): Promise<View> {
    const tick = () => {
      this.refresh().catch(() => {}).finally(() => {
        if (this.timer !== null) this.timer = setTimeout(tick, this.everyMs);
      });
    };
    this.timer = setTimeout(tick, this.everyMs);
    return this.refresh();
  }

  /**
   * A read that starts after this call, so it holds whatever the caller wrote before it (a claim's own placement).
   * A read already under way may have started before that write: callers then share the one after it.
   */
  refresh(): Promise<View> {
    if (this.reading === null) return this.read();
    this.after ??= this.reading.catch(() => undefined).then(() => {
      this.after = null;
      return this.reading ?? this.read(); // one begun meanwhile began after the callers too
    });
    return this.after;
  }

  /**
   * For a request naming a database this view lacks: a read that begins after the call (it sees a placement written
   * before the request came), shared by every request waiting, and begun no sooner than LOOKUP_GAP_MS after the last
   * read, so a tenant's requests for missing databases cost etcd at most one read per gap, however many they are.
   */
  lookup(): Promise<View> {
    if (this.lookingUp !== null) return this.lookingUp;
    const wait = this.readStartedAt + LOOKUP_GAP_MS - performance.now();
    if (wait <= 0) return this.refresh();
    const next = new Promise((r) => setTimeout(r, wait)).then(() => {
      this.lookingUp = null; // callers from here on wait for the next lookup: this read may begin before them
      return this.refresh();
    });
    this.lookingUp = next;
    return next;
  }

  private read(): Promise<View> {
    this.readStartedAt = performance.now();
    this.reading = (async () => {
      try {
        const { revision, kvs } = await this.etcd.prefix(ROOT);
        if (revision >= this.view.revision) {
          this.view = parse(revision, kvs);
          this.readAt = performance.now();
        }
        await this.onView(this.view);
        return this.view;
      } finally {
        this.reading = null;
      }
    })();
    return this.reading;
  }

  stop(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }
}
