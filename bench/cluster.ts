// `npm run bench:cluster`: what a synchronous follower costs a write, and how long failover takes (docs/scaling.md).
// Both setups are the same shape: an in-process proxy and `serve db` child processes on loopback, DB_HISTORY_DAYS=0.
//   single : one `serve db` (DB_SERVICE_URL)         cluster : etcd + three `serve db` nodes (CLUSTER_ETCD)
//   --seconds N   per measurement (default 5)        --writers N   concurrent writers (default 8, over 4 databases)
//   --short       2 s, for CI (exit 1 when a write gets an answer other than 200 or failover does not happen in 30 s)
import { parseArgs } from 'node:util';
import { rmSync } from 'node:fs';
import { startCluster } from '../test/helpers/cluster.ts';
import { freePort } from '../test/helpers/ports.ts';
import { spawnProduct, startProduct, tempDir, testEnv, type Product } from '../test/helpers/product.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, seconds: { type: 'string' }, writers: { type: 'string' } } });
const SECONDS = Number(args.seconds ?? (args.short ? 2 : 5));
const WRITERS = Number(args.writers ?? 8);
const DATABASES = ['b0', 'b1', 'b2', 'b3'];
const log = (s: string) => process.stderr.write(`[cluster] ${s}\n`);
let failed = false;

async function setUp(proxy: Product): Promise<void> {
  for (const database of DATABASES) {
    const r = await proxy.db('web', 'migrate', { database, migrations: [{ id: '1', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, w INTEGER, payload TEXT)' }] });
    if (r.status !== 200) throw new Error(`migrate: ${r.text}`);
  }
}

/** WRITERS closed-loop writers, one row per request, for SECONDS: writes/s and latency percentiles. */
async function measure(name: string, proxy: Product): Promise<void> {
  const latencies: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  await Promise.all(Array.from({ length: WRITERS }, async (_, w) => {
    const database = DATABASES[w % DATABASES.length]!;
    while (performance.now() < end) {
      const t = performance.now();
      const r = await proxy.db('web', 'execute', { database, statements: [{ sql: 'INSERT INTO t (w, payload) VALUES (?, ?)', params: [w, 'x'.repeat(100)] }] });
      if (r.status !== 200) {
        failed = true;
        log(`${name}: ${r.status} ${r.text.slice(0, 200)}`);
      }
      latencies.push(performance.now() - t);
    }
  }));
  latencies.sort((a, b) => a - b);
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))]!.toFixed(1);
  log(`${name.padEnd(26)} ${(latencies.length / SECONDS).toFixed(0).padStart(6)} writes/s   p50 ${q(0.5)} ms   p99 ${q(0.99)} ms   (${WRITERS} writers, ${DATABASES.length} databases, ${SECONDS} s)`);
}

// Single node, split like the cluster (proxy ↔ serve db over loopback), so the difference is replication.
{
  const dataDir = tempDir();
  const port = await freePort();
  const env = { DB_HISTORY_DAYS: '0', LOG_LEVEL: 'silent' };
  const node = await spawnProduct(testEnv(dataDir, { ...env, PORT: String(port) }), ['serve', 'db']);
  const proxy = await startProduct({ ...env, DB_SERVICE_URL: `http://127.0.0.1:${port}` }, 'proxy');
  try {
    await setUp(proxy);
    await measure('single node', proxy);
  } finally {
    await proxy.close();
    node.killAll();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

{
  const cluster = await startCluster({ nodes: 3, ttlS: 2 });
  try {
    await setUp(cluster.proxy);
    await measure('cluster, sync follower', cluster.proxy);
    // Failover: kill -9 of b0's primary under one writer; time to its next 200.
    const victim = cluster.node((await cluster.placement('acme', 'web', 'b0'))!.primary);
    cluster.kill(victim);
    const killedAt = performance.now();
    for (;;) {
      const r = await cluster.proxy.db('web', 'execute', { database: 'b0', statements: [{ sql: 'INSERT INTO t (w, payload) VALUES (0, ?)', params: ['after'] }] });
      if (r.status === 200) break;
      if (performance.now() - killedAt > 30_000) throw new Error('no failover in 30 s');
      await new Promise((res) => setTimeout(res, 20));
    }
    const ms = performance.now() - killedAt;
    const over = ms > cluster.ttlS * 1000 + 1000 ? ' — over TTL + 1 s (test/cluster.test.ts asserts it; a busy machine delays it)' : '';
    log(`failover after kill -9 of a primary: first 200 after ${ms.toFixed(0)} ms (CLUSTER_LEASE_TTL_S=${cluster.ttlS})${over}`);
  } finally {
    await cluster.close();
  }
}
process.exit(failed ? 1 : 0);
