// Scale-out on etcd (docs/scaling.md): real etcd, three `serve db` nodes, a proxy. Every 200 is on two disks;
// a primary killed with -9 loses nothing acknowledged, leaves no version gap, and writes resume within TTL + 1 s.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventIds, startCluster, type TestCluster } from './helpers/cluster.ts';

const ORG = 'acme';
const REPO = 'web';

describe('cluster: synchronous follower and failover', () => {
  let cluster: TestCluster;
  before(async () => {
    cluster = await startCluster({ nodes: 3, ttlS: 2, env: { LOG_LEVEL: process.env.TEST_CLUSTER_LOG ?? 'silent' } });
  });
  after(async () => {
    if (process.env.TEST_CLUSTER_LOG) for (const n of cluster.nodes) process.stderr.write(`--- ${n.id}\n${(n.proc?.stdout() ?? '') + (n.proc?.stderr() ?? '')}\n`);
    await cluster?.close();
  });

  const db = (op: string, body: unknown) => cluster.proxy.db(REPO, op, body);

  test('a new database gets a primary and another node as follower; each 200 is already in the follower\'s copy', async () => {
    const mig = await db('migrate', { database: 'one', migrations: [{ id: '0001', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER, seq INTEGER)' }] });
    assert.equal(mig.status, 200, mig.text);
    const p = (await cluster.placement(ORG, REPO, 'one'))!;
    assert.ok(p.follower !== null && p.follower !== p.primary, JSON.stringify(p));
    for (let i = 0; i < 5; i++) {
      const res = await db('execute', { database: 'one', statements: [{ sql: 'INSERT INTO t (writer, seq) VALUES (0, ?)', params: [i] }] });
      assert.equal(res.status, 200, res.text);
      const onFollower = eventIds(cluster.node(p.follower!), ORG, REPO, 'one');
      const onPrimary = eventIds(cluster.node(p.primary), ORG, REPO, 'one');
      assert.equal(onFollower.get(res.json.version), onPrimary.get(res.json.version), `version ${res.json.version} on the follower with the same event id`);
    }
  });

  test('kill -9 of a primary under writers: every 200 is on the new primary with its event id, no gap, writes resume within TTL + 1 s', async () => {
    const databases = Array.from({ length: 5 }, (_, i) => `d${i}`);
    for (const database of databases) {
      const res = await db('migrate', { database, migrations: [{ id: '0001', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER, seq INTEGER)' }] });
      assert.equal(res.status, 200, res.text);
    }
    const victim = (await cluster.placement(ORG, REPO, 'd0'))!.primary;
    const acked: { database: string; version: number; writer: number; seq: number; at: number }[] = [];
    const refusals = new Map<number, number>();
    let stop = false;
    const writer = async (w: number) => {
      const database = databases[w % databases.length]!;
      for (let seq = 0; !stop; seq++) {
        const res = await db('execute', { database, statements: [{ sql: 'INSERT INTO t (writer, seq) VALUES (?, ?)', params: [w, seq] }] });
        if (res.status === 200) acked.push({ database, version: res.json.version, writer: w, seq, at: performance.now() });
        else {
          assert.equal(res.status, 503, res.text); // racing the failover: refused, never a wrong answer
          assert.ok(res.headers['retry-after'], 'a 503 says when to retry');
          refusals.set(res.status, (refusals.get(res.status) ?? 0) + 1);
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    };
    const writers = Array.from({ length: 10 }, (_, w) => writer(w));
    await new Promise((r) => setTimeout(r, 1000));
    const killedAt = performance.now();
    const ackedBeforeKill = acked.length;
    cluster.kill(cluster.node(victim));
    await new Promise((r) => setTimeout(r, cluster.ttlS * 1000 + 2500));
    stop = true;
    await Promise.all(writers);
    assert.ok(ackedBeforeKill > 20, `writes went through before the kill (${ackedBeforeKill})`);

    const victimNode = cluster.node(victim);
    for (const database of databases) {
      const p = (await cluster.placement(ORG, REPO, database))!;
      assert.notEqual(p.primary, victim, `${database} has a live primary`);
      const primary = cluster.node(p.primary);
      const ids = eventIds(primary, ORG, REPO, database);
      const versions = [...ids.keys()];
      assert.deepEqual(versions, Array.from({ length: versions.length }, (_, i) => i + 1), `${database}: no version gap`);
      const mine = acked.filter((a) => a.database === database);
      const victimIds = eventIds(victimNode, ORG, REPO, database);
      for (const a of mine) {
        assert.ok(ids.has(a.version), `${database}: version ${a.version} got a 200 and is on the new primary`);
        if (victimIds.has(a.version) && a.at < killedAt) assert.equal(ids.get(a.version), victimIds.get(a.version), `${database}: version ${a.version} has the same event id`);
      }
      const rows = await db('query', { database, statements: [{ sql: 'SELECT writer, seq FROM t' }] });
      assert.equal(rows.status, 200, rows.text);
      const have = new Set((rows.json.results[0].rows as [number, number][]).map(([w, q]) => `${w}/${q}`));
      for (const a of mine) assert.ok(have.has(`${a.writer}/${a.seq}`), `${database}: row ${a.writer}/${a.seq} got a 200 and is there`);
      const resumed = mine.find((a) => a.at > killedAt);
      assert.ok(resumed, `${database}: writes resumed`);
      if (victimIds.size > 0) process.stderr.write(`${database}: first 200 after the kill at +${Math.round(resumed.at - killedAt)} ms\n`);
    }
    const d0resumed = acked.find((a) => a.database === 'd0' && a.at > killedAt)!;
    assert.ok(d0resumed.at - killedAt <= cluster.ttlS * 1000 + 1000, `writes to d0 resumed ${Math.round(d0resumed.at - killedAt)} ms after the kill (lease TTL ${cluster.ttlS} s + 1 s)`);
  });
});
