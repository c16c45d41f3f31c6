// A real cluster for tests: one etcd, N `serve db` nodes as child processes (own DATA_DIR each), an in-process proxy.
import { existsSync, rmSync } from 'node:fs';
import { after, before } from 'node:test';
import { join } from 'node:path';
import { Etcd } from '../../src/cluster/etcd.ts';
import { PLACEMENT, type Placement } from '../../src/cluster/placement.ts';
import { spawnProduct, startProduct, tempDir, testEnv, type Product, type SpawnedProduct } from './product.ts';
import { startEtcd, type EtcdProcess } from './etcd.ts';
import { freePort } from './ports.ts';
import { openSqlite } from './sqlite-file.ts';

export interface ClusterNodeProcess {
  id: string;
  url: string;
  dataDir: string;
  proc: SpawnedProduct | null;
}

export interface TestCluster {
  etcd: EtcdProcess;
  client: Etcd;
  nodes: ClusterNodeProcess[];
  proxy: Product;
  ttlS: number;
  start(node: ClusterNodeProcess): Promise<void>;
  /** kill -9 of the node's whole process group (its executors too). */
  kill(node: ClusterNodeProcess): void;
  placement(org: string, repo: string, database: string): Promise<Placement | null>;
  node(id: string): ClusterNodeProcess;
  close(): Promise<void>;
}

/** Events of a database's change log in a node's DATA_DIR, read from the file (the node may be dead): version → id. */
export function eventIds(node: ClusterNodeProcess, org: string, repo: string, database: string): Map<number, string> {
  const path = join(node.dataDir, 'db', org, repo, `${database}.sqlite`);
  if (!existsSync(path)) return new Map();
  const db = openSqlite(path, { readOnly: true });
  try {
    const rows = db.prepare('SELECT version, event FROM _scopebase_changes ORDER BY version').all() as { version: number; event: string }[];
    return new Map(rows.map((r) => [Number(r.version), (JSON.parse(r.event) as { id: string }).id]));
  } finally {
    db.close();
  }
}

/** `dataDirs`: the nodes' DATA_DIRs (e.g. small filesystems a test mounted), the caller's to remove; else temporary ones. */
export async function startCluster({ nodes = 3, ttlS = 2, env = {}, dataDirs }: { nodes?: number; ttlS?: number; env?: Record<string, string>; dataDirs?: string[] } = {}): Promise<TestCluster> {
  const etcd = await startEtcd();
  const client = new Etcd([etcd.url]);
  // No shedding on a late event loop: these tests are about replication, and CI runs them beside other suites on two cores.
  const common = { CLUSTER_ETCD: etcd.url, CLUSTER_LEASE_TTL_S: String(ttlS), DB_HISTORY_DAYS: '0', DB_MAX_LOOP_DELAY_MS: '0', ...env };
  const list: ClusterNodeProcess[] = [];
  for (let i = 1; i <= nodes; i++) {
    const port = await freePort();
    list.push({ id: `n${i}`, url: `http://127.0.0.1:${port}`, dataDir: dataDirs?.[i - 1] ?? tempDir('scopebase-node-'), proc: null });
  }
  const start = async (node: ClusterNodeProcess) => {
    for (let attempt = 1; ; attempt++) {
      try {
        node.proc = await spawnProduct(testEnv(node.dataDir, { ...common, PORT: new URL(node.url).port, CLUSTER_NODE_ID: node.id, CLUSTER_ADVERTISE_URL: node.url }), ['serve', 'db']);
        return;
      } catch (e) {
        // The free port was taken meanwhile (exit 78 names it): another one. etcd slower than the node's first call
        // allows (a busy disk beside other suites) makes it exit too: start it again.
        const message = (e as Error).message;
        if (attempt === 3 || !/exited with 78|etcd unreachable/.test(message)) throw e;
        if (/exited with 78/.test(message)) node.url = `http://127.0.0.1:${await freePort()}`;
      }
    }
  };
  let proxy: Product;
  try {
    await Promise.all(list.map(start));
    proxy = await startProduct(common, 'proxy'); // its own temporary DATA_DIR, removed when it closes
  } catch (e) {
    for (const n of list) n.proc?.killAll();
    await client.close();
    await etcd.stop();
    throw e;
  }
  // The proxy's first view may predate the nodes' registrations.
  for (let i = 0; i < 100 && (await client.prefix('/scopebase/nodes/')).kvs.length < nodes; i++) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 300));
  return {
    etcd, client, nodes: list, proxy, ttlS, start,
    kill(node) {
      node.proc?.killAll();
      node.proc = null;
    },
    async placement(org, repo, database) {
      const kv = (await client.prefix(`${PLACEMENT}${org}/${repo}/${database}`)).kvs[0];
      if (!kv) return null;
      const p = JSON.parse(kv.value) as { primary: string; follower: string | null };
      return { ...p, epoch: kv.modRevision };
    },
    node: (id) => list.find((n) => n.id === id)!,
    async close() {
      await proxy.close();
      for (const n of list) {
        try {
          n.proc?.killAll();
        } catch { /* gone */ }
        if (dataDirs === undefined) rmSync(n.dataDir, { recursive: true, force: true });
      }
      await client.close();
      await etcd.stop();
    },
  };
}

/**
 * One cluster for the enclosing describe: started before its tests (handed to `use`), closed after them, each node's
 * output printed first when TEST_CLUSTER_LOG is set (then also the nodes' LOG_LEVEL).
 */
export function clusterForSuite(opts: { nodes?: number; ttlS?: number; env?: Record<string, string> }, use: (cluster: TestCluster) => void): void {
  let cluster: TestCluster | undefined;
  before(async () => {
    cluster = await startCluster({ ...opts, env: { LOG_LEVEL: process.env.TEST_CLUSTER_LOG ?? 'silent', ...opts.env } });
    use(cluster);
  });
  after(async () => {
    if (process.env.TEST_CLUSTER_LOG && cluster) for (const n of cluster.nodes) process.stderr.write(`--- ${n.id}\n${(n.proc?.stdout() ?? '') + (n.proc?.stderr() ?? '')}\n`);
    await cluster?.close();
  });
}
