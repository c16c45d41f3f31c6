// CLUSTER_DURABILITY=async (docs/scaling.md): a write's 200 does not wait for the follower, so writes go on while it
// is away; what it missed reaches it once it answers again. The loss window is what it had not received. A mirror
// still gets only what the follower holds (docs/scaling.md, Mirrors on a cluster).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventIds, startCluster, type TestCluster } from './helpers/cluster.ts';
import { assertAllAcknowledgedKept, createTables, ORG, REPO, startWriters } from './helpers/cluster-writers.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster: async durability', () => {
  let cluster: TestCluster;
  const receiver = new Receiver();
  before(async () => {
    await receiver.start();
    const mirrors = JSON.stringify([{ name: 'hook', url: receiver.url, secret: newSecret() }]);
    cluster = await startCluster({ nodes: 3, ttlS: 2, env: { CLUSTER_DURABILITY: 'async', LOG_LEVEL: 'silent', DB_MIRRORS: mirrors } });
  });
  after(async () => {
    await cluster?.close();
    await receiver.stop();
  });

  test('a paused follower does not stop writes; it catches up when it answers again', async () => {
    await createTables(cluster, ['a0']);
    const p = (await cluster.placement(ORG, REPO, 'a0'))!;
    const follower = cluster.node(p.follower!);
    const writers = startWriters(cluster, ['a0'], 4);
    await sleep(500);
    // Delivery begins once placement grants it (a poll away; longer on a busy machine): let it start before the pause.
    await waitFor(() => receiver.all.some((r) => r.event.database === 'a0'), 15_000, 'the mirror to get a first event');
    const pausedAt = performance.now();
    process.kill(-follower.proc!.child.pid!, 'SIGSTOP');
    let during;
    let delivered: (readonly [number, string])[] = [];
    try {
      await sleep(1000); // shorter than the follower's lease: it stays the follower
      during = writers.acked.filter((a) => a.at > pausedAt + 200);
      delivered = receiver.all.filter((r) => r.event.database === 'a0').map((r) => [r.event.version, r.event.id] as const);
    } finally {
      process.kill(-follower.proc!.child.pid!, 'SIGCONT');
    }
    assert.ok(during.length > 0, 'writes got 200 while the follower was paused');
    const onPausedFollower = eventIds(follower, ORG, REPO, 'a0');
    assert.ok(during.some((a) => !onPausedFollower.has(a.version)), 'some of them were not on the follower when answered (the loss window)');
    await sleep(1000);
    await writers.stop();
    assert.ok(delivered.length > 0, 'the mirror got events before the pause');
    for (const [version, id] of delivered) assert.equal(onPausedFollower.get(version), id, `the mirror got version ${version} only once the follower held it`);
    await sleep(500);
    const now = (await cluster.placement(ORG, REPO, 'a0'))!;
    const caughtUp = eventIds(cluster.node(now.follower!), ORG, REPO, 'a0');
    for (const a of writers.acked) assert.ok(caughtUp.has(a.version), `version ${a.version} reached the follower once it answered`);
    await assertAllAcknowledgedKept(cluster, ['a0'], writers.acked);
    const log = eventIds(cluster.node(now.primary), ORG, REPO, 'a0');
    await waitFor(() => new Set(receiver.all.filter((r) => r.event.database === 'a0').map((r) => r.event.id)).size === log.size, 30_000, 'the mirror to catch up');
    for (const r of receiver.all) assert.equal(log.get(r.event.version), r.event.id, `version ${r.event.version} as the primary has it`);
  });
});
