// Mirror delivery on a primary that took up a database it did not just receive (src/cluster/DESIGN.md, the guarantee
// "only a database's primary delivers to mirrors, and a mirror never gets an event the next primary lacks"):
// a primary restarted faster than its lease TTL finds its old leader key and serves under it. Its copy may end with
// writes its follower never acknowledged (committed here, not shipped). Delivery must not send them: the follower,
// in line under the same placement, takes over when the old key expires and writes other events under those versions.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { eventIds, startCluster, type ClusterNodeProcess, type TestCluster } from './helpers/cluster.ts';
import { createTables, ORG, REPO, startWriters } from './helpers/cluster-writers.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const DB = 'a0';
let cluster: TestCluster;
const receiver = new Receiver();

before(async () => {
  await receiver.start();
  const mirrors = JSON.stringify([{ name: 'hook', url: receiver.url, secret: newSecret() }]);
  // TTL 8 s: the primary's restart (a new process, 0.6–2 s here) and its time as primary come before its old leader key expires.
  cluster = await startCluster({ nodes: 3, ttlS: 8, env: { LOG_LEVEL: process.env.TEST_CLUSTER_LOG ?? 'silent', DB_MIRRORS: mirrors, DB_MIRROR_MAX_BACKOFF_MS: '300' } });
});

after(async () => {
  if (process.env.TEST_CLUSTER_LOG) for (const n of cluster.nodes) process.stderr.write(`--- ${n.id}\n${(n.proc?.stdout() ?? '') + (n.proc?.stderr() ?? '')}\n`);
  await cluster?.close();
  await receiver.stop();
});

const group = (n: ClusterNodeProcess, signal: NodeJS.Signals) => process.kill(-n.proc!.child.pid!, signal);
const received = () => receiver.all.filter((r) => r.event.database === DB);
const maxOf = (ids: Map<number, string>) => Math.max(0, ...ids.keys());

test('a primary restarted within its lease TTL delivers only what its follower acknowledged, not its copy\'s unshipped tail', async () => {
  await createTables(cluster, [DB]);
  const p = (await cluster.placement(ORG, REPO, DB))!;
  const primary = cluster.node(p.primary);
  const follower = cluster.node(p.follower!);
  const writers = startWriters(cluster, [DB], 4);
  try {
    await waitFor(() => received().length >= 20, 20_000, 'first deliveries');

    // The follower stops answering: the primary's writes commit on its disk and wait for an ack that never comes.
    group(follower, 'SIGSTOP');
    await sleep(500);
    cluster.kill(primary);
    const held = maxOf(eventIds(follower, ORG, REPO, DB));
    const tail = maxOf(eventIds(primary, ORG, REPO, DB));
    assert.ok(tail > held, `the primary committed writes its follower never got (primary at ${tail}, follower at ${held})`);

    // Back on its DATA_DIR before its old lease expired: it finds its leader key and is primary again.
    const restartedAt = performance.now();
    await cluster.start(primary);
    process.stderr.write(`restart took ${Math.round(performance.now() - restartedAt)} ms\n`);
    await sleep(1500); // time enough for its delivery to send anything it was granted
    const early = received().filter((r) => r.event.version > held).map((r) => r.event.version);
    const now = (await cluster.placement(ORG, REPO, DB))!;
    cluster.kill(primary);
    assert.ok(now.primary === primary.id && now.epoch === p.epoch, 'the restarted primary served under its old leader key (no retake yet): the case under test');
    group(follower, 'SIGCONT');

    // The follower (in line under the same placement) takes over once the old leader key expires; writes go on there.
    await waitFor(async () => (await cluster.placement(ORG, REPO, DB))!.primary === follower.id, cluster.ttlS * 1000 + 10_000, 'the follower to take over');
    const top = Math.max(tail, ...received().map((r) => r.event.version));
    await waitFor(() => maxOf(eventIds(follower, ORG, REPO, DB)) > top, 20_000, 'writes on the new primary past the old tail');
    await writers.stop();
    const log = eventIds(follower, ORG, REPO, DB);
    await waitFor(() => new Set(received().map((r) => r.event.version)).size >= log.size, 30_000, 'the mirror to catch up');

    // Nothing a mirror received is missing from (or different on) the new primary.
    const wrong = received().filter((r) => log.get(r.event.version) !== r.event.id).map((r) => r.event.version);
    assert.deepEqual(wrong, [], `versions the mirror got with an event id the new primary lacks (sent above the follower's ${held} while it was stopped: ${early.join(',') || 'none'})`);
    assert.deepEqual(early, [], `the restarted primary delivered versions its follower did not hold (follower at ${held})`);
  } finally {
    await writers.stop();
    if (follower.proc) group(follower, 'SIGCONT');
  }
});
