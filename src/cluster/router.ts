// The proxy's side: each request goes to its database's primary as placement in etcd says; a database not placed
// yet goes to a live node chosen by its name (that node claims it). Nothing known → 503, never a guess at data.
import { createHash } from 'node:crypto';
import type { DbHandler, DbRequest, DbResponse, Scope } from '../db/contract.ts';
import { createRemoteDb } from '../db/remote.ts';
import { pipelineDatabase } from '../db/hrana/index.ts';
import { ApiError } from '../shared/errors.ts';
import type { ClusterConfig } from '../shared/config.ts';
import { Etcd } from './etcd.ts';
import { PlacementWatch, pollEveryMs, scopeKey } from './placement.ts';

type Remote = DbHandler & { close(): Promise<void> };

/** The database a request names (its body, its pipeline path or its import query); null when it cannot be told. */
function databaseOf(req: DbRequest): string | null {
  if (req.upload) return new URLSearchParams(req.upload.query).get('database') ?? 'main';
  const fromPipeline = pipelineDatabase(req.op);
  if (fromPipeline !== null) return fromPipeline;
  try {
    const db = (JSON.parse(req.body.toString('utf8')) as { database?: unknown }).database;
    return db === undefined ? 'main' : typeof db === 'string' ? db : null;
  } catch {
    return null;
  }
}

export class ClusterRouter implements DbHandler {
  private readonly etcd: Etcd;
  readonly watch: PlacementWatch;
  private readonly remotes = new Map<string, Remote>();
  private readonly rootKey: Buffer;

  constructor(config: ClusterConfig, rootKey: Buffer) {
    this.etcd = new Etcd(config.etcd);
    this.watch = new PlacementWatch(this.etcd, pollEveryMs(config.leaseTtlS));
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
    if (p === undefined) {
      const h = createHash('sha256').update(key).digest().readUInt32BE(0);
      return view.nodes.get(live[h % live.length]!)!;
    }
    const url = view.nodes.get(p.primary);
    if (url === undefined || !view.leaders.has(key)) throw unavailable(`its primary ${p.primary} is gone and its follower is taking over`);
    return url;
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
