// A database whose follower was just replaced, then whose primary died before the new follower was brought in line:
// the new follower holds nothing acknowledged and rightly does not take over (it would lose writes), so only the
// primary's copy holds every acknowledged write. Before the fix the primary, restarted on its DATA_DIR, never took its
// leader key back either, and the database answered 503 for ever. Now the recorded primary takes it back (the same
// conditions as a promotion: placement unchanged, leader key absent) and brings its follower in line.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { LEADER, NODES } from '../src/cluster/placement.ts';
import { eventIds, startCluster, type ClusterNodeProcess, type TestCluster } from './helpers/cluster.ts';
import { assertAllAcknowledgedKept, createTables, ORG, REPO, startWriters } from './helpers/cluster-writers.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const DB = 'r0';

describe('cluster: the primary takes its database back', () => {
  let cluster: TestCluster;
  before(async () => {
    cluster = await startCluster({ nodes: 3, ttlS: 2, env: { LOG_LEVEL: process.env.TEST_CLUSTER_LOG ?? 'silent' } });
  });
  after(async () => {
    if (process.env.TEST_CLUSTER_LOG) for (const n of cluster.nodes) process.stderr.write(`--- ${n.id}\n${(n.proc?.stdout() ?? '') + (n.proc?.stderr() ?? '')}\n`);
    await cluster?.close();
  });

  const file = (node: ClusterNodeProcess) => existsSync(join(node.dataDir, 'db', ORG, REPO, `${DB}.sqlite`));
  const leader = async () => (await cluster.client.prefix(`${LEADER}${ORG}/${REPO}/${DB}`)).kvs[0]?.value ?? null;
  const group = (node: ClusterNodeProcess, signal: NodeJS.Signals) => process.kill(-node.proc!.child.pid!, signal);

  test('follower replaced, new follower not in line, primary killed: restarted on its DATA_DIR, it takes the database back with every acknowledged write', async () => {
    await createTables(cluster, [DB]);
    const first = (await cluster.placement(ORG, REPO, DB))!;
    const primary = cluster.node(first.primary);
    const oldFollower = cluster.node(first.follower!);
    const newFollower = cluster.nodes.find((n) => n !== primary && n !== oldFollower)!;
    assert.ok(!file(newFollower), 'the third node has nothing of the database');

    const writers = startWriters(cluster, [DB], 3);
    let stopped = false;
    try {
      for (let i = 0; i < 100 && writers.acked.length < 30; i++) await sleep(50);
      assert.ok(writers.acked.length >= 30, `writes got 200 before the failures (${writers.acked.length})`);

      // The third node cannot answer (its lease holds for up to a TTL), the follower dies; its lease is revoked
      // rather than waited for, so the primary names the third node while that node is still alive in etcd.
      group(newFollower, 'SIGSTOP');
      stopped = true;
      const failedAt = performance.now();
      const lease = (await cluster.client.prefix(`${NODES}${oldFollower.id}`)).kvs[0]!.lease;
      cluster.kill(oldFollower);
      await cluster.client.revoke(lease);
      let replaced = first;
      for (let i = 0; i < 100 && replaced.follower !== newFollower.id; i++) {
        await sleep(20);
        replaced = (await cluster.placement(ORG, REPO, DB))!;
      }
      assert.deepEqual([replaced.primary, replaced.follower], [primary.id, newFollower.id], `the primary named the third node its follower: ${JSON.stringify(replaced)}`);
      assert.ok(performance.now() - failedAt < cluster.ttlS * 1000, 'named while the third node\'s lease still held');

      // Before the new follower could be brought in line (it is stopped), the primary dies.
      cluster.kill(primary);
      const killedAt = performance.now();
      for (let i = 0; i < 100 && (await leader()) !== null; i++) await sleep(50);
      assert.equal(await leader(), null, 'the primary\'s leader key went with its lease');
      group(newFollower, 'SIGCONT');
      stopped = false;
      // The new follower, back with a new lease, holds nothing acknowledged: it does not take over.
      await sleep(cluster.ttlS * 1000 + 500);
      const waiting = (await cluster.placement(ORG, REPO, DB))!;
      assert.deepEqual([waiting.primary, waiting.follower, waiting.epoch], [primary.id, newFollower.id, replaced.epoch], 'no node took over without the acknowledged writes');
      assert.equal(await leader(), null);
      assert.ok(!file(newFollower), 'the new follower was never brought in line');
      // The primary comes back on the same DATA_DIR: writes are served again, by it, within a bound.
      const restartAt = performance.now();
      assert.deepEqual(writers.acked.filter((a) => a.at > killedAt), [], 'nothing got a 200 while the database had no primary');
      process.stderr.write(`${DB}: ${writers.acked.length} writes acknowledged before the failures; ${writers.refused} refused\n`);
      await cluster.start(primary);
      const bound = cluster.ttlS * 1000 + 3000;
      while (!writers.acked.some((a) => a.at > restartAt) && performance.now() - restartAt < bound) await sleep(50);
      const firstAfter = writers.acked.find((a) => a.at > restartAt);
      assert.ok(firstAfter !== undefined, `a write got a 200 within ${bound} ms of the primary's restart (placement ${JSON.stringify(await cluster.placement(ORG, REPO, DB))}, leader ${await leader()})`);
      process.stderr.write(`${DB}: first 200 ${Math.round(firstAfter.at - restartAt)} ms after the restart began (${Math.round(firstAfter.at - killedAt)} ms after the kill)\n`);
      for (let i = 0; i < 40 && writers.acked.filter((a) => a.at > restartAt).length < 20; i++) await sleep(50);
    } finally {
      if (stopped) group(newFollower, 'SIGCONT');
      await writers.stop();
    }

    const now = (await cluster.placement(ORG, REPO, DB))!;
    assert.equal(now.primary, primary.id, 'the recorded primary took it back');
    assert.equal(await leader(), primary.id);
    assert.ok(now.epoch > first.epoch, 'under a new epoch');
    // No write acknowledged twice (two primaries would hand out the same version twice), every one kept, no gap.
    const versions = writers.acked.map((a) => a.version);
    assert.equal(new Set(versions).size, versions.length, 'each version got at most one 200');
    await assertAllAcknowledgedKept(cluster, [DB], writers.acked);
    // The follower was brought in line and holds every acknowledged write with the primary's event ids.
    assert.ok(now.follower !== null && now.follower !== primary.id);
    const onPrimary = eventIds(primary, ORG, REPO, DB);
    const onFollower = eventIds(cluster.node(now.follower), ORG, REPO, DB);
    for (const a of writers.acked) assert.equal(onFollower.get(a.version), onPrimary.get(a.version), `version ${a.version} on the follower with the primary's event id`);
    await cluster.start(oldFollower);
  });
});
