// The proxy's side: each request goes to its database's primary as placement in etcd says; a database not placed
// yet goes to the live node with the fewest primaries (that node claims it). Nothing known → 503, never a guess at data.
import type { DbHandler, DbRequest, DbResponse, Scope } from '../db/contract.ts';
import { createRemoteDb } from '../db/remote.ts';
import { pipelineDatabase } from '../db/hrana/index.ts';
import { ApiError } from '../shared/errors.ts';
import { isDatabaseName } from '../shared/names.ts';
import { jsonTooComplex } from '../shared/http.ts';
import type { ClusterConfig } from '../shared/config.ts';
import { Etcd } from './etcd.ts';
import { leastLoaded, PlacementWatch, pollEveryMs, scopeKey, type View } from './placement.ts';

/** A database sent to a node to be claimed counts on that node until placement shows it, or this long (a read of a database that does not exist claims nothing). */
const PENDING_MS = 5_000;

type Remote = DbHandler & { close(): Promise<void> };

/**
 * The database a request names (its body, its pipeline path or its import query); null when it cannot be told or is
 * no database name (SPEC 2): the node refuses it, and the proxy keeps nothing of a name no node will place.
 */
function databaseOf(req: DbRequest): string | null {
  const named = (db: unknown) => (db === undefined ? 'main' : typeof db === 'string' && isDatabaseName(db) ? db : null);
  if (req.upload) return named(new URLSearchParams(req.upload.query).get('database') ?? undefined);
  const fromPipeline = pipelineDatabase(req.op);
  if (fromPipeline !== null) return fromPipeline;
  const text = req.body.toString('utf8');
  if (jsonTooComplex(text) !== null) return null; // parsed, 16 million nested arrays held the loop 7 s: the node refuses it
  try {
    return named((JSON.parse(text) as { database?: unknown }).database);
  } catch {
    return null;
  }
}

export class ClusterRouter implements DbHandler {
  private readonly etcd: Etcd;
  readonly watch: PlacementWatch;
  private readonly remotes = new Map<string, Remote>();
  private readonly rootKey: Buffer;
  /** Databases not placed yet that this proxy sent to a node: later requests follow, and a burst of new ones spreads. */
  private readonly pending = new Map<string, { node: string; at: number }>();
  /** How many of `pending` each node was sent: kept as entries come and go, so no request counts them all. */
  private readonly pendingPerNode = new Map<string, number>();

  constructor(config: ClusterConfig, rootKey: Buffer) {
    this.etcd = new Etcd(config.etcd);
    this.watch = new PlacementWatch(this.etcd, pollEveryMs(config.leaseTtlS), (view) => this.settle(view));
    this.rootKey = rootKey;
  }

  async start(): Promise<void> {
    await this.watch.start().catch(() => {}); // etcd away at start: 503s until it answers
  }

  async handle(req: DbRequest): Promise<DbResponse> {
    const url = this.nodeFor(req);
    let remote = this.remotes.get(url);
    if (!remote) this.remotes.set(url, (remote = createRemoteDb({ url, rootKey: this.rootKey })));
    return remote.handle(req);
  }

  private nodeFor(req: DbRequest): string {
    const view = this.watch.view;
    const live = [...view.nodes.keys()].sort();
    if (live.length === 0) throw unavailable('no database node is registered in etcd (or etcd cannot be read)');
    const database = databaseOf(req);
    // A request the nodes will refuse anyway (a bad body) may go anywhere: the answer is the same.
    if (database === null) return view.nodes.get(live[0]!)!;
    const scope: Scope = { org: req.org, repo: req.repo, database };
    const key = scopeKey(scope);
    const p = view.placements.get(key);
    if (p === undefined) return view.nodes.get(this.claimer(key))!;
    this.forget(key);
    const url = view.nodes.get(p.primary);
    if (url === undefined || !view.leaders.has(key)) throw unavailable(`its primary ${p.primary} is gone and its follower is taking over`);
    return url;
  }

  /** The node that should claim a new database (DESIGN.md: least-loaded placement). */
  private claimer(key: string): string {
    const view = this.watch.view;
    const now = performance.now();
    // Entries are in the order they were made, so the expired ones are at the front: a request costs what expired, not
    // what is pending (a tenant naming thousands of new databases a second must not slow every org's requests).
    for (const [k, e] of this.pending) {
      if (now - e.at <= PENDING_MS) break;
      this.forget(k);
    }
    const held = this.pending.get(key);
    if (held && view.nodes.has(held.node)) return held.node;
    this.forget(key);
    const node = leastLoaded(view, key, this.pendingPerNode)!;
    this.pending.set(key, { node, at: now });
    this.pendingPerNode.set(node, (this.pendingPerNode.get(node) ?? 0) + 1);
    return node;
  }

  /** Each read of placement: names placed since (or sent to a node gone) stop counting as pending (once a read, not per request). */
  private settle(view: View): void {
    for (const [k, e] of this.pending) if (view.placements.has(k) || !view.nodes.has(e.node)) this.forget(k);
  }

  private forget(key: string): void {
    const e = this.pending.get(key);
    if (e === undefined) return;
    this.pending.delete(key);
    const left = this.pendingPerNode.get(e.node)! - 1;
    if (left === 0) this.pendingPerNode.delete(e.node);
    else this.pendingPerNode.set(e.node, left);
  }

  async close(): Promise<void> {
    this.watch.stop();
    await Promise.all([...this.remotes.values()].map((r) => r.close()));
    await this.etcd.close();
  }
}

function unavailable(why: string): ApiError {
  return new ApiError('unavailable', `the database cannot be reached now: ${why}; nothing ran, retry after a second`, { committed: false }, { 'retry-after': '1' });
}
