// SPEC 9.2 on a cluster (docs/backups.md, "Backups of a cluster"): `scopebase backup` of each node's DATA_DIR while
// it serves, and a node brought back from an older backup. Before the fix, a primary's node restored and started
// again within its lease TTL served under its old leader key with its older copy: its handshake found the follower's
// newer versions missing and replaced the follower's copy with its own, and every write acknowledged after the
// backup was gone from both (222 of 510 here), with no error anywhere. Now the follower, which holds them, takes over.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { LEADER, NODES, PLACEMENT } from '../src/cluster/placement.ts';
import { eventIds, clusterForSuite, type ClusterNodeProcess, type TestCluster } from './helpers/cluster.ts';
import { assertAllAcknowledgedKept, createTables, ORG, REPO, startWriters, type Ack } from './helpers/cluster-writers.ts';
import { failedInOneLine, oneLine, runCli } from './helpers/cli.ts';
import { tempDir } from './helpers/product.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster: backups of the nodes, and a node restored from one', () => {
  let cluster: TestCluster;
  // A TTL the restore and restart fit in: the restored node comes back while etcd still names it primary.
  clusterForSuite({ nodes: 3, ttlS: 10 }, (c) => (cluster = c));
  const work = tempDir('scopebase-cluster-backups-');
  after(() => rmSync(work, { recursive: true, force: true }));

  /** The CLI on a node's DATA_DIR, with none of the cluster's variables unless given (an operator's shell). */
  const cli = (node: ClusterNodeProcess, args: string[], env: Record<string, string> = {}) => {
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CLUSTER_')));
    return runCli(args, { ...clean, DATA_DIR: node.dataDir, ...env });
  };
  const leaderOf = async (db: string) => (await cluster.client.prefix(`${LEADER}${ORG}/${REPO}/${db}`)).kvs[0] ?? null;
  const nodeLease = async (node: ClusterNodeProcess) => (await cluster.client.prefix(`${NODES}${node.id}`)).kvs[0]?.lease ?? null;
  /** The table's rows in a node's copy, read from its file. */
  const rowsOn = (node: ClusterNodeProcess, db: string) => {
    const file = openSqlite(join(node.dataDir, 'db', ORG, REPO, `${db}.sqlite`), { readOnly: true });
    try {
      return file.prepare('SELECT id, writer, seq FROM t ORDER BY id').all().map((r) => `${r.id}:${r.writer}/${r.seq}`);
    } finally {
      file.close();
    }
  };
  /** Restores a node's DATA_DIR (`--force`: the old one is moved aside, and removed here). */
  const restore = async (node: ClusterNodeProcess, backup: string, env: Record<string, string> = {}) => {
    const r = await cli(node, ['restore', '--force', backup], env);
    for (const aside of readdirSync(dirname(node.dataDir)).filter((n) => n.startsWith(`${basename(node.dataDir)}.before-restore-`))) {
      rmSync(join(dirname(node.dataDir), aside), { recursive: true, force: true });
    }
    return r;
  };
  /** Waits until writes get 200 again after `since`, and a follower holds the primary's versions; then the final checks. */
  async function settle(db: string, writers: ReturnType<typeof startWriters>, since: number): Promise<void> {
    for (let i = 0; i < 300 && writers.acked.filter((a) => a.at > since).length < 20; i++) await sleep(50);
    await writers.stop();
    assert.ok(writers.acked.some((a) => a.at > since), `writes got 200 again (placement ${JSON.stringify(await cluster.placement(ORG, REPO, db))})`);
    const versions = writers.acked.map((a) => a.version);
    assert.equal(new Set(versions).size, versions.length, 'each version got at most one 200');
    await assertAllAcknowledgedKept(cluster, [db], writers.acked);
    // Row by row and event by event, the follower holds what the primary holds (its last shipment may be on its way).
    const p = (await cluster.placement(ORG, REPO, db))!;
    const primary = cluster.node(p.primary);
    const follower = cluster.node(p.follower!);
    for (let i = 0; i < 100 && rowsOn(follower, db).length !== rowsOn(primary, db).length; i++) await sleep(50);
    assert.deepEqual(rowsOn(follower, db), rowsOn(primary, db), 'the follower\'s rows are the primary\'s');
    assert.deepEqual([...eventIds(follower, ORG, REPO, db)], [...eventIds(primary, ORG, REPO, db)], 'the follower\'s change log is the primary\'s');
  }
  const ackedAfter = (acked: Ack[], at: number) => acked.filter((a) => a.at > at).length;

  test('each node\'s backup holds the databases it is primary and follower of; the primary\'s node restored from it and started again within its TTL loses no acknowledged write', async () => {
    await createTables(cluster, ['b0', 'b1', 'b2']);
    const DB = 'b0';
    const first = (await cluster.placement(ORG, REPO, DB))!;
    const primary = cluster.node(first.primary);
    const writers = startWriters(cluster, [DB], 2);
    let restartedAt = 0;
    try {
      for (let i = 0; i < 200 && writers.acked.length < 30; i++) await sleep(50);
      // Every node's DATA_DIR backed up while it serves: each holds every database it is primary or follower of.
      for (const node of cluster.nodes) {
        const b = await cli(node, ['backup', join(work, node.id)]);
        assert.equal(b.code, 0, b.stderr);
        const manifest = JSON.parse(readFileSync(join(work, node.id, 'manifest.json'), 'utf8')) as { files: { path: string; version?: number }[] };
        for (const db of ['b0', 'b1', 'b2']) {
          const p = (await cluster.placement(ORG, REPO, db))!;
          if (p.primary !== node.id && p.follower !== node.id) continue;
          const entry = manifest.files.find((f) => f.path === `db/${ORG}/${REPO}/${db}.sqlite`);
          assert.ok(entry !== undefined && entry.version! >= 1, `${node.id}'s backup holds ${db} (${p.primary === node.id ? 'primary' : 'follower'})`);
        }
        const v = await cli(node, ['verify', join(work, node.id)]);
        assert.equal(v.code, 0, v.stdout + v.stderr);
      }
      const backedUp = writers.acked.length;
      for (let i = 0; i < 200 && writers.acked.length < backedUp + 30; i++) await sleep(50);

      // Time travel is refused on a cluster node (history is per node): nothing to diverge.
      const travel = await cluster.proxy.db(REPO, 'restore', { database: DB, toVersion: 1 });
      assert.equal(travel.status, 400, travel.text);

      // The primary's node is lost, its DATA_DIR restored from the older backup, and it starts again at once.
      cluster.kill(primary);
      const r = await restore(primary, join(work, primary.id));
      assert.equal(r.code, 0, r.stderr);
      await cluster.start(primary);
      restartedAt = performance.now();
      const leader = await leaderOf(DB);
      assert.ok(leader?.value === primary.id && leader.lease !== await nodeLease(primary), 'back within its TTL: etcd still names it primary, under its old lease');
    } finally {
      if (restartedAt === 0) await writers.stop();
    }
    await settle(DB, writers, restartedAt);
    const now = (await cluster.placement(ORG, REPO, DB))!;
    assert.equal(now.primary, first.follower, 'the follower, which holds every acknowledged write, took over');
    process.stderr.write(`b0: ${writers.acked.length} acknowledged, ${ackedAfter(writers.acked, restartedAt)} after the restart, ${writers.refused} refused\n`);
  });

  test('a follower\'s node restored from an older backup is brought in line by a snapshot, and takes over with every acknowledged write', async () => {
    const DB = 'b1';
    const first = (await cluster.placement(ORG, REPO, DB))!;
    const [primary, follower] = [cluster.node(first.primary), cluster.node(first.follower!)];
    const writers = startWriters(cluster, [DB], 2, { first: 10 });
    let failedOverAt = 0;
    try {
      for (let i = 0; i < 200 && writers.acked.length < 30; i++) await sleep(50);
      const b = await cli(follower, ['backup', join(work, `${follower.id}-b1`)]);
      assert.equal(b.code, 0, b.stderr);
      const backedUp = writers.acked.length;
      for (let i = 0; i < 200 && writers.acked.length < backedUp + 30; i++) await sleep(50);
      cluster.kill(follower);
      const r = await restore(follower, join(work, `${follower.id}-b1`));
      assert.equal(r.code, 0, r.stderr);
      await cluster.start(follower);
      const restartedAt = performance.now();
      // In line again: it holds the newest acknowledged version with the primary's event id.
      const inLine = () => {
        const last = writers.acked.at(-1)!;
        return eventIds(follower, ORG, REPO, DB).get(last.version) === eventIds(primary, ORG, REPO, DB).get(last.version);
      };
      for (let i = 0; i < 300 && (ackedAfter(writers.acked, restartedAt) < 10 || !inLine()); i++) await sleep(50);
      assert.ok(inLine(), 'the restored follower was brought in line');
      // Its primary goes (its lease revoked rather than waited for): the restored follower takes over.
      const lease = (await nodeLease(primary))!;
      cluster.kill(primary);
      await cluster.client.revoke(lease);
      failedOverAt = performance.now();
    } finally {
      if (failedOverAt === 0) await writers.stop();
    }
    await settle(DB, writers, failedOverAt).finally(() => cluster.start(primary));
    assert.equal((await cluster.placement(ORG, REPO, DB))!.primary, follower.id);
  });

  test('the primary\'s node restored while its follower cannot answer: it does not take the database back over the follower in line, which takes over when it answers', async () => {
    const DB = 'b3';
    await createTables(cluster, [DB]);
    const first = (await cluster.placement(ORG, REPO, DB))!;
    const [primary, follower] = [cluster.node(first.primary), cluster.node(first.follower!)];
    const group = (node: ClusterNodeProcess, signal: NodeJS.Signals) => process.kill(-node.proc!.child.pid!, signal);
    const writers = startWriters(cluster, [DB], 2, { first: 20 });
    let paused = false;
    let resumedAt = 0;
    try {
      for (let i = 0; i < 200 && writers.acked.length < 30; i++) await sleep(50);
      assert.equal((await cli(primary, ['backup', join(work, `${primary.id}-b3`)])).code, 0);
      const backedUp = writers.acked.length;
      for (let i = 0; i < 200 && writers.acked.length < backedUp + 30; i++) await sleep(50);
      cluster.kill(primary);
      assert.equal((await restore(primary, join(work, `${primary.id}-b3`))).code, 0);
      // The follower cannot answer (its lease holds), the restored node starts, and its old leader key goes at once
      // (its lease revoked rather than waited for): it is the recorded primary, with a copy, and no leader key.
      group(follower, 'SIGSTOP');
      paused = true;
      await cluster.start(primary);
      const old = (await leaderOf(DB))!;
      assert.notEqual(old.lease, await nodeLease(primary), 'the leader key is on the lease of the node before its restore');
      await cluster.client.revoke(old.lease);
      await sleep(1500);
      assert.equal(await leaderOf(DB), null, 'nobody took the database while its follower in line could not answer');
      group(follower, 'SIGCONT');
      paused = false;
      resumedAt = performance.now();
    } finally {
      if (paused) group(follower, 'SIGCONT');
      if (resumedAt === 0) await writers.stop();
    }
    await settle(DB, writers, resumedAt);
    assert.equal((await cluster.placement(ORG, REPO, DB))!.primary, follower.id, 'the follower took over');
  });

  test('`scopebase restore` with a node\'s cluster environment is refused while etcd shows the node alive, and names the databases that wait for it', async () => {
    const node = cluster.nodes[2]!;
    const env = { CLUSTER_ETCD: cluster.etcd.url, CLUSTER_NODE_ID: node.id, CLUSTER_ADVERTISE_URL: node.url };
    const backup = join(work, `${node.id}-cli`);
    assert.equal((await cli(node, ['backup', backup])).code, 0);
    const aside = () => readdirSync(dirname(node.dataDir)).filter((n) => n.startsWith(`${basename(node.dataDir)}.before-restore-`));
    const refusal = new RegExp(`^scopebase: node ${node.id} is alive in etcd: .*stop it, wait until its lease has expired .*then restore; nothing was written$`);
    try {
      // Running: refused before the DATA_DIR lock is even tried.
      failedInOneLine(await cli(node, ['restore', '--force', backup], env), refusal);
      // Killed, its lease not expired yet: it would be back as primary with older copies. Refused all the same.
      const lease = (await nodeLease(node))!;
      cluster.kill(node);
      failedInOneLine(await cli(node, ['restore', '--force', backup], env), refusal);
      assert.deepEqual(aside(), [], 'nothing was moved aside');
      // Without the node's name, or without etcd, it does not guess.
      const noName = await cli(node, ['restore', '--force', backup], { CLUSTER_ETCD: cluster.etcd.url });
      assert.equal(noName.code, 78, noName.stderr);
      oneLine(noName, /CLUSTER_NODE_ID is not: run restore with the environment of the node/);
      const noEtcd = await cli(node, ['restore', '--force', backup], { ...env, CLUSTER_ETCD: 'http://127.0.0.1:1' });
      assert.equal(noEtcd.code, 3, noEtcd.stderr);
      oneLine(noEtcd, /cannot check in etcd \(CLUSTER_ETCD\) that node .* is stopped: .*nothing was written/);

      // Its lease gone: its databases fail over to their followers; one whose follower is gone waits for it, and is named.
      await cluster.client.put(`${PLACEMENT}${ORG}/${REPO}/ghost`, JSON.stringify({ primary: node.id, follower: 'gone' }));
      await cluster.client.revoke(lease);
      const primaryOf = async () => (await cluster.client.prefix(PLACEMENT)).kvs.filter((kv) => JSON.parse(kv.value).primary === node.id).length;
      for (let i = 0; i < 100 && (await primaryOf()) > 1; i++) await sleep(100);
      const r = await restore(node, backup, env);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^restored \d+ files/);
      assert.match(r.stderr, new RegExp(`^scopebase: node ${node.id} is still the recorded primary of 1 database no follower could take over \\(${ORG}/${REPO}/ghost\\): .* at this backup's versions`));
    } finally {
      await cluster.client.txn([], [{ delete: `${PLACEMENT}${ORG}/${REPO}/ghost` }]);
      if (node.proc === null) await cluster.start(node);
    }
  });
});
