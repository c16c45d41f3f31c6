// CLUSTER_DURABILITY=async (docs/scaling.md): a write's 200 does not wait for the follower, so writes go on while it
// is away; what it missed reaches it once it answers again. The loss window is what it had not received. A mirror
// still gets only what the follower holds (docs/scaling.md, Mirrors on a cluster).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, cpSync, mkdirSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { tempDir } from './helpers/product.ts';
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

describe('cluster: async durability, a shipment that failed', () => {
  // Each node's DATA_DIR is a real 64 MiB tmpfs, so the follower's disk can be filled and given back.
  const root = process.getuid?.() === 0;
  const dirs = root ? [1, 2, 3].map(() => tempDir('scopebase-node-')) : [];
  let cluster: TestCluster;
  before(async () => {
    for (const dir of dirs) execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64m', 'tmpfs', dir]);
    if (root) cluster = await startCluster({ nodes: 3, ttlS: 2, env: { CLUSTER_DURABILITY: 'async', LOG_LEVEL: 'silent' }, dataDirs: dirs });
  });
  after(async () => {
    await cluster?.close();
    for (const dir of dirs) {
      execFileSync('umount', ['-l', dir]);
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('is shipped again without a further write once the follower can take it', async (t) => {
    if (!root) return t.skip('mounting a tmpfs needs root (CI runs as root)');
    await createTables(cluster, ['full']);
    const p = (await cluster.placement(ORG, REPO, 'full'))!;
    const follower = cluster.node(p.follower!);
    await waitFor(() => eventIds(follower, ORG, REPO, 'full').size > 0, 15_000, 'the follower to hold the table');
    const ballast = join(follower.dataDir, 'ballast');
    const fd = openSync(ballast, 'w');
    try {
      const chunk = Buffer.alloc(1 << 20, 1);
      for (;;) writeSync(fd, chunk); // until ENOSPC: the follower's disk is full
    } catch (e) {
      assert.equal((e as NodeJS.ErrnoException).code, 'ENOSPC');
    } finally {
      closeSync(fd);
    }
    const res = await cluster.proxy.db(REPO, 'execute', { database: 'full', sql: 'INSERT INTO t(writer, seq) VALUES (1, 1)' });
    assert.equal(res.status, 200, res.text); // async: the 200 does not wait for the follower
    const version = res.json.version as number;
    await sleep(1500);
    // Read from a copy of its files: SQLite cannot open them in place on the full disk.
    const copy = { ...follower, dataDir: tempDir('scopebase-copy-') };
    const files = join(copy.dataDir, 'db', ORG, REPO);
    mkdirSync(files, { recursive: true });
    for (const suffix of ['', '-wal']) cpSync(join(follower.dataDir, 'db', ORG, REPO, `full.sqlite${suffix}`), join(files, `full.sqlite${suffix}`));
    const before = eventIds(copy, ORG, REPO, 'full');
    rmSync(copy.dataDir, { recursive: true, force: true });
    assert.ok(before.size > 0 && !before.has(version), 'premise: the full follower could not take the write');
    rmSync(ballast);
    await waitFor(() => eventIds(follower, ORG, REPO, 'full').has(version), 15_000, `version ${version} to reach the follower with no write after it`);
  });
});
