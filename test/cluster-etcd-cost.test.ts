// What a tenant's requests to databases that do not exist cost etcd, which every org's leases depend on
// (docs/scaling.md, "What a tenant can make etcd do"): a bounded number of txns and reads, whatever their number.
// Counted from etcd's own /metrics: calls of Txn and Range it started, the JSON gateway's included.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { pollEveryMs, LOOKUP_GAP_MS } from '../src/cluster/placement.ts';
import { GIVE_BACK_IDLE_MS, UNWRITTEN_PER_REPO } from '../src/cluster/claims.ts';
import { metrics } from '../src/shared/metrics.ts';
import { clusterForSuite, type TestCluster } from './helpers/cluster.ts';
import { etcdCalls } from './helpers/etcd.ts';
import { SQLITE, upload } from './helpers/imports.ts';
import type { HttpResult } from './helpers/product.ts';

const ORG = 'acme';
const NODES = 3;
const TTL_S = 4;
const MAX_DATABASES = 30;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const BAD = { statements: [{ sql: 'INSERT INTO nosuchtable VALUES (1)' }] };

/** A request answered 503 (executors busy on two shared cores, a placement race) is sent again, as a client following Retry-After does. */
async function retried(send: () => Promise<HttpResult>): Promise<HttpResult> {
  for (let i = 0; ; i++) {
    const res = await send();
    if (res.status !== 503 || i === 40) return res;
    assert.ok(res.headers['retry-after'], res.text);
    await sleep(100);
  }
}

/** `n` calls of `send`, `width` at a time, as a client looping over its requests with a few connections does. */
async function inParallel<T>(n: number, width: number, send: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      out[i] = await send(i);
    }
  }));
  return out;
}

/**
 * The reads of placement etcd may see in `ms` whatever the requests: every process's poll (the nodes and the proxy),
 * each node's shared lookups of databases its view lacks (one per LOOKUP_GAP_MS at most), and one after each txn.
 */
function readBound(ms: number, txns: number): number {
  return (Math.ceil(ms / pollEveryMs(TTL_S)) + 1) * (NODES + 1) + (Math.ceil(ms / LOOKUP_GAP_MS) + 1) * NODES + txns + 5;
}

describe('cluster: a tenant\'s requests to databases that do not exist cost etcd a bounded amount', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: NODES, ttlS: TTL_S, env: { DB_MAX_DATABASES_PER_REPO: String(MAX_DATABASES) } }, (c) => (cluster = c));

  const calls = () => etcdCalls(cluster.etcd.url);
  const placed = async (repo: string) => (await cluster.client.prefix(`/scopebase/placement/${ORG}/${repo}/`)).kvs.length;
  /** Runs `work`, then says (and returns) what it cost etcd. */
  async function measured<T>(label: string, work: () => Promise<T>): Promise<{ result: T; txn: number; range: number; ms: number }> {
    const before = await calls();
    const t0 = performance.now();
    const result = await work();
    const ms = performance.now() - t0;
    const after = await calls();
    const cost = { txn: after.txn - before.txn, range: after.range - before.range };
    process.stderr.write(`etcd cost: ${label} in ${Math.round(ms)} ms: ${cost.txn} txns, ${cost.range} reads (bound ${readBound(ms, cost.txn)})\n`);
    assert.ok(cost.range <= readBound(ms, cost.txn), `reads of placement bounded by time, not by requests: ${cost.range}`);
    return { result, ...cost, ms };
  }
  async function waitFor(check: () => Promise<boolean>, ms: number): Promise<boolean> {
    for (const end = performance.now() + ms; performance.now() < end; await sleep(100)) if (await check()) return true;
    return false;
  }

  test('a loop of failing first writes to one name (execute, libSQL, import) costs one claim each, given back once they stop', async () => {
    const N = 600;
    const libsql = Array.from({ length: 200 }, () => ({ type: 'execute', stmt: { sql: 'INSERT INTO nosuchtable VALUES (1)' } }));
    const { result, txn } = await measured(`${N} failing executes, a pipeline of ${libsql.length} failing writes, 100 failing imports`, async () => {
      const executes = inParallel(N, 20, () => retried(() => cluster.proxy.db('loop', 'execute', { database: 'typo', ...BAD })));
      const pipeline = cluster.proxy.call('/loop/_db/typo2/v2/pipeline', {
        body: { baton: null, requests: [...libsql, { type: 'close' }] }, headers: { authorization: `Bearer ${cluster.proxy.secret(ORG, 'loop')}` },
      });
      const imports = inParallel(100, 3, () => retried(() => upload(cluster.proxy, 'loop', 'database=typo3', Buffer.from('not a database at all'), SQLITE)));
      return { executes: await executes, pipeline: await pipeline, imports: await imports };
    });
    for (const r of result.executes) assert.equal(r.status, 400, r.text);
    for (const r of result.imports) assert.equal(r.status, 400, r.text);
    assert.equal(result.pipeline.status, 200, result.pipeline.text);
    assert.ok(result.pipeline.json.results.slice(0, libsql.length).every((r: { type: string }) => r.type === 'error'), result.pipeline.text);
    // Idle, the claims are given back (a name whose loop ended early already was): no key is left for databases that never came to be.
    const before = await calls();
    assert.ok(await waitFor(async () => (await placed('loop')) === 0, GIVE_BACK_IDLE_MS + 5000), 'given back once idle');
    const givenBack = (await calls()).txn - before.txn;
    process.stderr.write(`etcd cost: the give-backs after: ${givenBack} txns\n`);
    assert.ok(txn + givenBack <= 6, `one claim and one give-back per name, not per request: ${txn} + ${givenBack} txns`);
  });

  test('reads, status, export, snapshot, changes and restore of databases that do not exist, and libSQL reads, cost no txn and reads bounded by time', async () => {
    const secret = cluster.proxy.secret(ORG, 'reads');
    const kinds: ((i: number) => Promise<[string, HttpResult]>)[] = [
      async (i) => ['query', await cluster.proxy.db('reads', 'query', { database: `gone${i}`, sql: 'SELECT 1' })],
      async (i) => ['status', await cluster.proxy.db('reads', 'status', { database: `gone${i}` })],
      async (i) => ['export', await cluster.proxy.db('reads', 'export', { database: `gone${i}`, format: 'sql' })],
      async (i) => ['snapshot', await cluster.proxy.db('reads', 'snapshot', { database: `gone${i}` })],
      async (i) => ['changes', await cluster.proxy.db('reads', 'changes', { database: `gone${i}`, since: 0 })],
      async (i) => ['restore', await cluster.proxy.db('reads', 'restore', { database: `gone${i}`, toVersion: 1 })],
      async (i) => ['libsql', await cluster.proxy.call(`/reads/_db/gone${i}/v2/pipeline`, {
        body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT 1' } }, { type: 'close' }] }, headers: { authorization: `Bearer ${secret}` },
      })],
    ];
    const N = 700;
    const { result, txn } = await measured(`${N} reads of missing databases (7 kinds)`, () => inParallel(N, 30, async (i) => {
      for (let attempt = 0; ; attempt++) {
        const [kind, res] = await kinds[i % kinds.length]!(i);
        if (res.status !== 503 || attempt === 40) return [kind, res] as [string, HttpResult];
        await sleep(100);
      }
    }));
    const expected: Record<string, number> = { query: 404, status: 200, export: 404, snapshot: 404, restore: 404, libsql: 200 };
    for (const [kind, res] of result) {
      if (kind === 'changes') assert.ok(res.status === 200 || res.status === 404, `${kind}: ${res.status} ${res.text}`);
      else assert.equal(res.status, expected[kind], `${kind}: ${res.text}`);
    }
    assert.equal(txn, 0, 'no claim, no give-back');
    assert.equal(await placed('reads'), 0);
  });

  test('failing first writes to ever new names: at most UNWRITTEN_PER_REPO claims per repo on a node, the rest 429 with Retry-After; other repos create databases meanwhile', async () => {
    const N = 240;
    const other = inParallel(6, 2, async (i) => {
      await sleep(100 * i);
      return retried(() => cluster.proxy.db('bystander', 'execute', { database: `fine${i}`, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }] }));
    });
    const { result, txn } = await measured(`${N} failing writes to distinct new names`, () => inParallel(N, 20, (i) => retried(() => cluster.proxy.db('spray', 'execute', { database: `spray${i}`, ...BAD }))));
    const counts = new Map<number, number>();
    for (const r of result) {
      counts.set(r.status, (counts.get(r.status) ?? 0) + 1);
      assert.ok(r.status === 400 || r.status === 429, `${r.status}: ${r.text}`);
      if (r.status === 429) {
        assert.equal(r.json.error.code, 'rate_limited', r.text);
        assert.ok(Number(r.headers['retry-after']) >= 1, r.text);
      }
    }
    process.stderr.write(`etcd cost: answers ${JSON.stringify(Object.fromEntries(counts))}\n`);
    // The claims of this repo's own lingering failures, plus those of another repo's creations.
    assert.ok(txn <= UNWRITTEN_PER_REPO * NODES + 6 + 6, `claims bounded per repo and node, not per request: ${txn} txns`);
    for (const r of await other) assert.equal(r.status, 200, `another repo creates databases meanwhile: ${r.text}`);
    assert.ok(await waitFor(async () => (await placed('spray')) === 0, GIVE_BACK_IDLE_MS + 5000), 'given back once idle');
  });

  test('a repo at DB_MAX_DATABASES_PER_REPO: writes to new names get 507 before any claim, counted over the whole cluster', async () => {
    const made = await inParallel(MAX_DATABASES, 4, (i) => retried(() => cluster.proxy.db('full', 'execute', { database: `db${i}`, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }] })));
    for (const r of made) assert.equal(r.status, 200, r.text);
    const { result, txn } = await measured('100 writes to new names past the limit', () => inParallel(100, 10, (i) => retried(() => cluster.proxy.db('full', 'execute', { database: `more${i}`, statements: [{ sql: 'CREATE TABLE t (x)' }] }))));
    for (const r of result) {
      assert.equal(r.status, 507, r.text);
      assert.equal(r.json.error.code, 'quota_exceeded', r.text);
    }
    assert.equal(txn, 0, 'no claim');
    assert.equal(await placed('full'), MAX_DATABASES);
    const read = await cluster.proxy.db('full', 'query', { database: 'db0', sql: 'SELECT count(*) FROM t' });
    assert.equal(read.status, 200, `reads go on: ${read.text}`);
  });

  test('each process counts what it sends etcd (scopebase_cluster_etcd_requests_total), as etcd counts it', async () => {
    const ours = async (call: string) => (await metrics.getSingleMetric('scopebase_cluster_etcd_requests_total')!.get()).values.find((v) => v.labels.call === call)?.value ?? 0;
    const [before, etcdBefore] = [await ours('txn'), await calls()];
    await cluster.client.put('/scopebase-test/counted', 'x');
    await cluster.client.txn([{ key: '/scopebase-test/counted', absent: true }], [{ put: '/scopebase-test/counted', value: 'y' }]);
    assert.equal(await ours('txn') - before, 2);
    assert.equal((await calls()).txn - etcdBefore.txn, 2, 'nothing else in the cluster sent a txn meanwhile');
    assert.ok(await ours('range') > 0, 'the proxy\'s polls of placement, in this process, are counted');
  });
});
