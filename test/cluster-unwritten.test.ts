// A database claimed but never written, whose primary then dies: its follower was never brought in line (nothing to
// ship), so it waited for the primary for ever — and a primary back from the dead holds no leader key — answering
// 503 to every request. A `fresh` placement (a claim) whose follower holds no copy has nothing acknowledged to lose:
// the follower takes over, and the database is written there.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { eventIds, clusterForSuite, type ClusterNodeProcess, type TestCluster } from './helpers/cluster.ts';
import { GIVE_BACK_IDLE_MS } from '../src/cluster/claims.ts';

const ORG = 'acme';
const REPO = 'web';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster: a claim never written', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 3, ttlS: 2 }, (c) => (cluster = c));

  const file = (node: ClusterNodeProcess, database: string) => existsSync(join(node.dataDir, 'db', ORG, REPO, `${database}.sqlite`));

  test('its primary killed inside the first transaction: the follower takes over, writes get 200 there, nothing else is made', async () => {
    // BEGIN claims the database (a libSQL stream's write); the transaction stays open, its commit never comes.
    const open = await cluster.proxy.call(`/${REPO}/_db/ghost/v2/pipeline`, {
      body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: 'CREATE TABLE t (x)' } }] },
      headers: { authorization: `Bearer ${cluster.proxy.secret(ORG, REPO)}` },
    });
    assert.equal(open.status, 200, open.text);
    assert.deepEqual(open.json.results.map((r: { type: string }) => r.type), ['ok', 'ok'], open.text);
    const claimed = (await cluster.placement(ORG, REPO, 'ghost'))!;
    assert.ok(claimed !== null && claimed.follower !== null, `claimed with a follower: ${JSON.stringify(claimed)}`);
    const follower = cluster.node(claimed.follower!);
    assert.ok(!file(follower, 'ghost'), 'the follower has nothing of it');

    const primary = cluster.node(claimed.primary);
    const killedAt = performance.now();
    cluster.kill(primary);
    try {
      let res;
      for (;;) {
        res = await cluster.proxy.db(REPO, 'execute', { database: 'ghost', statements: [{ sql: 'CREATE TABLE t (x)' }, { sql: 'INSERT INTO t VALUES (1)' }] });
        if (res.status !== 503 || performance.now() - killedAt > cluster.ttlS * 1000 + 8000) break;
        assert.ok(res.headers['retry-after'], res.text);
        await sleep(200);
      }
      assert.equal(res.status, 200, `a write is served again within TTL + 8 s of the kill: ${res.text}`);
      process.stderr.write(`ghost: first 200 after the kill at +${Math.round(performance.now() - killedAt)} ms\n`);
      const now = (await cluster.placement(ORG, REPO, 'ghost'))!;
      assert.equal(now.primary, follower.id, 'the follower took over');
      assert.ok(now.follower !== null && now.follower !== primary.id, `with a live follower: ${JSON.stringify(now)}`);
      const rows = await cluster.proxy.db(REPO, 'query', { database: 'ghost', sql: 'SELECT x FROM t' });
      assert.deepEqual(rows.json.results[0].rows, [[1]], rows.text);
      assert.deepEqual([...eventIds(cluster.node(now.follower!), ORG, REPO, 'ghost')], [...eventIds(follower, ORG, REPO, 'ghost')], 'the new follower holds the write');
    } finally {
      await cluster.start(primary);
    }
    // The old primary, back with a new lease, takes nothing back: the database stays where it is, and is written.
    await sleep(500);
    const later = await cluster.proxy.db(REPO, 'execute', { database: 'ghost', sql: 'INSERT INTO t VALUES (2)' });
    assert.equal(later.status, 200, later.text);
    assert.equal((await cluster.placement(ORG, REPO, 'ghost'))!.primary, follower.id);
  });
  test('a claim nothing was made of, kept by a loop of failing writes, whose follower and then primary die: never without `fresh`, and the name is usable again', async () => {
    // A claim is given back only once no write came for a while, so a loop of failing writes keeps it. A new follower
    // named for it would drop `fresh` (its new follower holds no copy), and with the primary dead next, nobody could
    // take it over: 503 for ever on that name. Instead, a claim nothing was made of whose follower is gone is given
    // back, and the next write claims it anew.
    const name = 'orphan';
    const bad = () => cluster.proxy.db(REPO, 'execute', { database: name, statements: [{ sql: 'INSERT INTO nosuchtable VALUES (1)' }] });
    const first = await bad();
    assert.equal(first.status, 400, first.text);
    const claimed = (await cluster.placement(ORG, REPO, name))!;
    assert.ok(claimed !== null && claimed.fresh === true && claimed.follower !== null, `claimed, fresh: ${JSON.stringify(claimed)}`);
    const primary = cluster.node(claimed.primary);
    const follower = cluster.node(claimed.follower!);
    let looping = true;
    const seen: unknown[] = [];
    const loop = (async () => {
      while (looping) {
        const r = await bad();
        assert.ok([400, 429, 503].includes(r.status), r.text);
        await sleep(200);
      }
    })();
    const watch = (async () => {
      while (looping) {
        seen.push(await cluster.placement(ORG, REPO, name));
        await sleep(50);
      }
    })();
    try {
      cluster.kill(follower);
      await sleep(cluster.ttlS * 1000 + 1500); // its lease gone, and its primary acted on that
      cluster.kill(primary);
      await sleep(cluster.ttlS * 1000 + 1500);
    } finally {
      looping = false;
      await Promise.all([loop, watch]).finally(() => Promise.all([cluster.start(follower), cluster.start(primary)]));
    }
    const unfresh = seen.filter((p) => p !== null && (p as { fresh?: boolean }).fresh !== true);
    assert.deepEqual(unfresh, [], 'a placement nothing was written to is always `fresh`');
    const startedAt = performance.now();
    let res;
    do {
      res = await cluster.proxy.db(REPO, 'execute', { database: name, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }, { sql: 'INSERT INTO t VALUES (1)' }] });
      if (res.status === 503 || res.status === 429) await sleep(200);
    } while ((res.status === 503 || res.status === 429) && performance.now() - startedAt < cluster.ttlS * 1000 + 8000);
    assert.equal(res.status, 200, `the name is written again within TTL + 8 s: ${res.text}`);
    const rows = await cluster.proxy.db(REPO, 'query', { database: name, sql: 'SELECT count(*) FROM t' });
    assert.ok(rows.json?.results?.[0]?.rows?.[0]?.[0] >= 1, rows.text);
  });
  test('a node stopped (SIGTERM) gives back the claims nothing was made of before it exits: none outlives it', async () => {
    // Left in place, such a claim outlives the node's lease with no file anywhere: restarted with its follower (a
    // whole cluster stopped and started), no node could take it, and the name would answer 503 for ever.
    const name = 'stopping';
    const bad = await cluster.proxy.db(REPO, 'execute', { database: name, statements: [{ sql: 'INSERT INTO nosuchtable VALUES (1)' }] });
    const failedAt = performance.now();
    assert.equal(bad.status, 400, bad.text);
    const claimed = await cluster.placement(ORG, REPO, name);
    assert.ok(claimed !== null, 'claimed, and kept until idle');
    const node = cluster.node(claimed.primary);
    const proc = node.proc!;
    const exited = new Promise((r) => proc.child.once('exit', r));
    proc.child.kill('SIGTERM');
    await exited;
    const stoppedIn = performance.now() - failedAt;
    try {
      assert.ok(stoppedIn < GIVE_BACK_IDLE_MS, `premise: it exited before the claim would have gone idle (${Math.round(stoppedIn)} ms)`);
      assert.equal(await cluster.placement(ORG, REPO, name), null, 'given back before it exited');
    } finally {
      cluster.kill(node); // its executors, if any are left
      await cluster.start(node);
    }
  });
});

describe('cluster: a written database whose follower came back without its files', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 3, ttlS: 2 }, (c) => (cluster = c));

  test('its primary dead meanwhile: the follower, rejoined with an empty DATA_DIR, does not take over empty (it would drop every acknowledged write); the primary, back, takes it back', async () => {
    const first = await cluster.proxy.db(REPO, 'execute', { database: 'wiped', statements: [{ sql: 'CREATE TABLE t (x)' }, { sql: 'INSERT INTO t VALUES (1)' }] });
    assert.equal(first.status, 200, first.text);
    const placed = (await cluster.placement(ORG, REPO, 'wiped'))!;
    assert.equal(placed.fresh, true, `premise: its claim's placement, follower unchanged: ${JSON.stringify(placed)}`);
    const primary = cluster.node(placed.primary);
    const follower = cluster.node(placed.follower!);
    // The follower's disk is lost (killed, its DATA_DIR emptied), and its primary dies before it is back.
    cluster.kill(follower);
    rmSync(join(follower.dataDir, 'db'), { recursive: true, force: true });
    cluster.kill(primary);
    await cluster.start(follower);
    const until = performance.now() + cluster.ttlS * 1000 + 4000;
    while (performance.now() < until) {
      const r = await cluster.proxy.db(REPO, 'execute', { database: 'wiped', sql: 'INSERT INTO t VALUES (2)' });
      assert.equal(r.status, 503, `no write is served on an empty copy: ${r.text}`);
      await sleep(250);
    }
    assert.equal((await cluster.placement(ORG, REPO, 'wiped'))!.primary, primary.id, 'nobody took over');
    await cluster.start(primary);
    let res;
    const back = performance.now();
    do {
      await sleep(200);
      res = await cluster.proxy.db(REPO, 'query', { database: 'wiped', sql: 'SELECT x FROM t' });
    } while (res.status === 503 && performance.now() - back < cluster.ttlS * 1000 + 5000);
    assert.deepEqual(res.json?.results?.[0]?.rows, [[1]], `the acknowledged write is there: ${res.text}`);
  });
});
