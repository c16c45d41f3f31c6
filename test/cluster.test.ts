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
});
