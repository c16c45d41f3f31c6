// A failed first write leaves nothing behind in a cluster (docs/scaling.md, "New databases"): no placement or leader
// key in etcd once no write came for GIVE_BACK_IDLE_MS, no file on any node, as a single node leaves no file. A write
// queued behind the failing one is never lost nor run on a node without placement: the claim is released only when no
// other write to the database is admitted, and writes arriving during the release are admitted again afterwards.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createRemoteDb } from '../src/db/remote.ts';
import { LEADER, PLACEMENT } from '../src/cluster/placement.ts';
import { GIVE_BACK_IDLE_MS } from '../src/cluster/claims.ts';
import { clusterForSuite, type ClusterNodeProcess, type TestCluster } from './helpers/cluster.ts';
import { SQLITE, upload } from './helpers/imports.ts';
import type { HttpResult } from './helpers/product.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const ORG = 'acme';
const REPO = 'web';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Polls `check` every `every` ms (2) for up to `ms` (5 s). */
async function waitFor(check: () => boolean | Promise<boolean>, ms = 5000, every = 2): Promise<boolean> {
  for (const end = performance.now() + ms; performance.now() < end; await sleep(every)) if (await check()) return true;
  return false;
}
/** A row written at most once: a write answered 503 `committed: null` (a follower too busy to confirm) is sent again. */
const ONCE = 'INSERT INTO t SELECT ? WHERE NOT EXISTS (SELECT 1 FROM t WHERE x = ?)';
/** A failed first write's claim is given back once no write came for GIVE_BACK_IDLE_MS: waited for with some margin. */
const GIVEN_BACK_MS = GIVE_BACK_IDLE_MS + 5000;

describe('cluster: a failed first write leaves no placement', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 3, ttlS: 4 }, (c) => (cluster = c));

  const db = (op: string, body: unknown) => cluster.proxy.db(REPO, op, body);
  const keys = async (prefix: string) => (await cluster.client.prefix(`${prefix}${ORG}/${REPO}/`)).kvs.map((kv) => kv.key);
  const file = (node: ClusterNodeProcess, database: string) => existsSync(join(node.dataDir, 'db', ORG, REPO, `${database}.sqlite`));
  /**
   * A write answered 503 (a placement race) is sent again, as a client following Retry-After does; so is one answered
   * 429 (its repo's new databases not yet written, on that node, at their limit: a failed one's claim lingers a while).
   */
  const retried = async (send: () => Promise<HttpResult>): Promise<HttpResult> => {
    for (let i = 0; ; i++) {
      const res = await send();
      if ((res.status !== 503 && res.status !== 429) || i === 60) return res;
      assert.ok(res.headers['retry-after'], res.text);
      await sleep(res.status === 429 ? 1000 : 100);
    }
  };
  const pipeline = (database: string, requests: unknown[]) => cluster.proxy.call(`/${REPO}/_db/${database}/v2/pipeline`, {
    body: { baton: null, requests: [...requests, { type: 'close' }] }, headers: { authorization: `Bearer ${cluster.proxy.secret(ORG, REPO)}` },
  });

  test('many failing first writes (execute, migrate, libSQL, import) to distinct new names leave no key in etcd and no file', async () => {
    const before = (await keys(PLACEMENT)).length;
    const failing: [string, () => Promise<HttpResult>][] = [];
    for (let i = 0; i < 12; i++) {
      failing.push([`typo${i}`, () => db('execute', { database: `typo${i}`, statements: [{ sql: 'INSERT INTO nosuchtable VALUES (1)' }] })]);
      failing.push([`badmig${i}`, () => db('migrate', { database: `badmig${i}`, migrations: [{ id: '0001', sql: 'CREATE TABLE t (x) STRICT; INSERT INTO nope VALUES (1)' }] })]);
    }
    for (let i = 0; i < 4; i++) {
      failing.push([`hrana${i}`, async () => {
        const r = await pipeline(`hrana${i}`, [{ type: 'execute', stmt: { sql: 'INSERT INTO nosuchtable VALUES (1)' } }]);
        assert.equal(r.json?.results?.[0]?.type, 'error', r.text);
        return { ...r, status: 400 };
      }]);
      failing.push([`imp${i}`, () => upload(cluster.proxy, REPO, `database=imp${i}`, Buffer.from('not a database at all'), SQLITE)]);
    }
    // Several at once, as a client spraying typos does.
    const answers = await Promise.all(failing.map(async ([name, send]) => [name, await retried(send)] as const));
    for (const [name, res] of answers) {
      assert.equal(res.status, 400, `${name}: ${res.text}`);
      assert.ok(res.json?.error?.code || res.json?.results, `${name}: SPEC 3's shape: ${res.text}`);
    }
    const names = answers.map(([name]) => name);
    // Given back once no write came for a while (a loop of failing writes costs one claim, not one per request).
    assert.ok(await waitFor(async () => (await keys(PLACEMENT)).length === before, GIVEN_BACK_MS, 100), 'every claim given back');
    const left = (await keys(PLACEMENT)).filter((k) => names.some((n) => k.endsWith(`/${n}`)));
    const leaders = (await keys(LEADER)).filter((k) => names.some((n) => k.endsWith(`/${n}`)));
    assert.deepEqual(left, [], 'no placement key for a database that never came to be');
    assert.deepEqual(leaders, [], 'no leader key either');
    assert.equal((await keys(PLACEMENT)).length, before);
    for (const n of cluster.nodes) for (const name of names) assert.ok(!file(n, name), `no file for ${name} on ${n.id}`);
    for (const name of names) assert.equal((await db('query', { database: name, sql: 'SELECT 1' })).status, 404, `${name} does not exist`);
    // An interactive transaction that creates nothing leaves nothing either.
    const tx = await pipeline('txnone', [{ type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: 'INSERT INTO nosuchtable VALUES (1)' } }, { type: 'execute', stmt: { sql: 'ROLLBACK' } }]);
    assert.equal(tx.status, 200, tx.text);
    // Given back once idle after the transaction ends (its reply does not wait for that).
    assert.ok(await waitFor(async () => (await cluster.placement(ORG, REPO, 'txnone')) === null, GIVEN_BACK_MS, 100), 'a rolled-back transaction on a new database leaves no placement');
    for (const n of cluster.nodes) assert.ok(!file(n, 'txnone'), `no file for txnone on ${n.id}`);
  });

  test('a failing first write followed at once by a good one: the database is placed, holds the good write, readable through the proxy and its primary', async () => {
    for (let i = 0; i < 5; i++) {
      const name = `seq${i}`;
      const bad = await db('execute', { database: name, statements: [{ sql: 'INSERT INTO nosuchtable VALUES (1)' }] });
      assert.equal(bad.status, 400, bad.text);
      const good = await retried(() => db('execute', { database: name, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }, { sql: ONCE, params: [i, i] }] }));
      assert.equal(good.status, 200, good.text);
      await assertPlacedWith(name, [[i]]);
    }
  });

  test('concurrent failing and good first writes to the same new names lose nothing', async () => {
    const names = Array.from({ length: 8 }, (_, i) => `race${i}`);
    const sends: Promise<{ name: string; good: number | null; res: HttpResult }>[] = [];
    for (const name of names) {
      for (let k = 0; k < 6; k++) {
        // Interleaved: bad, good, bad, good, … each its own request, a few ms apart (some land while a release runs).
        const at = sleep(k * 4 + Math.random() * 4);
        if (k % 2 === 0) sends.push(at.then(() => retried(() => db('execute', { database: name, statements: [{ sql: 'INSERT INTO nosuchtable VALUES (1)' }] }))).then((res) => ({ name, good: null, res })));
        else {
          sends.push(at.then(() => retried(() => db('execute', {
            database: name, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }, { sql: ONCE, params: [k, k] }],
          }))).then((res) => ({ name, good: k, res })));
        }
      }
    }
    const results = await Promise.all(sends);
    for (const r of results) assert.equal(r.res.status, r.good === null ? 400 : 200, `${r.name} ${r.good}: ${r.res.text}`);
    for (const name of names) await assertPlacedWith(name, [[1], [3], [5]]);
  });

  test('a good write that arrives while a failed first write\'s claim is given back waits for it, then claims the database again', async () => {
    // etcd paused: the release's txn, GIVE_BACK_IDLE_MS after the failing write, cannot finish, so a good write sent
    // just after it began arrives during it. It then waits and claims the database afresh (a new epoch); one that came
    // before the release began would keep the claim, also right: the scenario is repeated until it came during it.
    let during = 0;
    for (let attempt = 0; attempt < 6 && during === 0; attempt++) {
      const name = `during${attempt}`;
      const bad = await db('execute', { database: name, statements: [{ sql: 'CREATE TABLE slow (x)' }, { sql: 'INSERT INTO nosuchtable VALUES (1)' }] });
      const failedAt = performance.now();
      assert.equal(bad.status, 400, bad.text);
      const claimed = await cluster.placement(ORG, REPO, name);
      assert.ok(claimed !== null, 'the failing write claimed the database, kept until idle');
      await sleep(GIVE_BACK_IDLE_MS - 700);
      cluster.etcd.pause();
      let resumedAt = Infinity;
      let good: Promise<HttpResult> | undefined;
      try {
        await sleep(failedAt + GIVE_BACK_IDLE_MS + 200 + 100 * attempt - performance.now()); // the release began, and waits for etcd
        good = retried(() => db('execute', { database: name, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }, { sql: ONCE, params: [42, 42] }] }));
        await sleep(300);
        resumedAt = performance.now();
        cluster.etcd.resume();
        const g = await good;
        assert.equal(g.status, 200, g.text);
      } finally {
        if (resumedAt === Infinity) cluster.etcd.resume();
        await good?.catch(() => {});
      }
      const now = await cluster.placement(ORG, REPO, name);
      if (now !== null && now.epoch !== claimed.epoch) during++; // given back, then claimed afresh by the good write
      await assertPlacedWith(name, [[42]]);
      const slow = await db('query', { database: name, sql: "SELECT count(*) FROM sqlite_schema WHERE name = 'slow'" });
      assert.deepEqual(slow.json.results[0].rows, [[0]], 'nothing of the failed write');
    }
    assert.equal(during, 1, 'a good write arrived while the placement was being given back');
  });

  /** Placed, with a follower; the rows through the proxy, on the primary directly, and in the follower's file; other nodes refuse with 503. */
  async function assertPlacedWith(name: string, rows: unknown[][]): Promise<void> {
    const p = await cluster.placement(ORG, REPO, name);
    assert.ok(p !== null && p.follower !== null && p.follower !== p.primary, `${name} is placed: ${JSON.stringify(p)}`);
    const leader = (await cluster.client.prefix(`${LEADER}${ORG}/${REPO}/${name}`)).kvs[0];
    assert.equal(leader?.value, p.primary, `${name}: its primary holds the leader key`);
    const sql = 'SELECT x FROM t ORDER BY x';
    const viaProxy = await retried(() => db('query', { database: name, sql }));
    assert.equal(viaProxy.status, 200, viaProxy.text);
    assert.deepEqual(viaProxy.json.results[0].rows, rows, `${name} through the proxy`);
    for (const n of cluster.nodes) {
      const remote = createRemoteDb({ url: n.url, rootKey: cluster.proxy.config.rootKeys[0]! });
      try {
        const res = await remote.handle({ op: 'query', org: ORG, repo: REPO, authorization: `Bearer ${cluster.proxy.secret(ORG, REPO)}`, body: Buffer.from(JSON.stringify({ database: name, sql })), requestId: 'test' });
        const body = JSON.parse(String(res.body));
        if (n.id === p.primary) {
          assert.equal(res.status, 200, JSON.stringify(body));
          assert.deepEqual(body.results[0].rows, rows, `${name} on its primary ${n.id}`);
        } else {
          assert.equal(res.status, 503, `${name} on ${n.id}, not its primary: ${JSON.stringify(body)}`);
          assert.equal(body.error.details.committed, false);
        }
      } finally {
        await remote.close();
      }
    }
    const copy = openSqlite(join(cluster.node(p.follower!).dataDir, 'db', ORG, REPO, `${name}.sqlite`), { readOnly: true });
    try {
      assert.deepEqual(copy.prepare(sql).all().map((r) => [r.x]), rows, `${name} in the follower's copy`);
    } finally {
      copy.close();
    }
  }
});
