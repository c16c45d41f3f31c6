// docs/backups.md, "Backups of a cluster": a primary's node restored from an older backup (`scopebase restore`, with
// the node's cluster environment) while its follower is not in line (that follower's node restarted while the
// primary's was down). Before the fix, the restored node took the database back at the backup's versions and sent
// its copy over the follower's: every write acknowledged after the backup was gone from both, with no error anywhere.
// Now the restored node finds the follower's copy past its backup on the history the backup lost, gives the database
// up to it (a line at error level naming the database), and the follower serves it with every acknowledged write. The
// second test guards the other side: once a follower held the restore, an older copy left on a node that was down is
// written over (with the mark kept for ever, that copy was given the database and the restored history was lost).
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { NODES } from '../src/cluster/placement.ts';
import { eventIds, clusterForSuite, type ClusterNodeProcess, type TestCluster } from './helpers/cluster.ts';
import { assertAllAcknowledgedKept, createTables, ORG, REPO, startWriters } from './helpers/cluster-writers.ts';
import { runCli } from './helpers/cli.ts';
import { tempDir } from './helpers/product.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster: a primary restored from a backup while its follower is not in line', () => {
  let cluster: TestCluster;
  // Error lines on the nodes' output: the give-up must say which database.
  clusterForSuite({ nodes: 3, ttlS: 3, env: { LOG_LEVEL: process.env.TEST_CLUSTER_LOG ?? 'error' } }, (c) => (cluster = c));
  const work = tempDir('scopebase-cluster-restore-');
  after(() => rmSync(work, { recursive: true, force: true }));

  /** The CLI on a node's DATA_DIR, with only the cluster variables given (an operator's shell). */
  const cli = (node: ClusterNodeProcess, args: string[], env: Record<string, string> = {}) => {
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CLUSTER_')));
    return runCli(args, { ...clean, DATA_DIR: node.dataDir, ...env });
  };
  const nodeLease = async (node: ClusterNodeProcess) => (await cluster.client.prefix(`${NODES}${node.id}`)).kvs[0]?.lease ?? null;
  const markOf = (node: ClusterNodeProcess, db: string) => join(node.dataDir, 'db', ORG, REPO, `${db}.sqlite.restored`);
  /** `scopebase restore --force` of a node's DATA_DIR with its cluster environment; the old DATA_DIR is removed. */
  const restore = async (node: ClusterNodeProcess, backup: string) => {
    const env = { CLUSTER_ETCD: cluster.etcd.url, CLUSTER_NODE_ID: node.id, CLUSTER_ADVERTISE_URL: node.url };
    const r = await cli(node, ['restore', '--force', backup], env);
    assert.equal(r.code, 0, r.stderr);
    for (const aside of readdirSync(dirname(node.dataDir)).filter((n) => n.startsWith(`${basename(node.dataDir)}.before-restore-`))) {
      rmSync(join(dirname(node.dataDir), aside), { recursive: true, force: true });
    }
    return r;
  };
  /** Writes to `db` until `count` of them got 200 past `at` (or 20 s). */
  const ackedPast = async (writers: ReturnType<typeof startWriters>, at: number, count: number) => {
    for (let i = 0; i < 400 && writers.acked.filter((a) => a.at > at).length < count; i++) await sleep(50);
    return writers.acked.filter((a) => a.at > at).length;
  };

  test('the follower, which holds the writes acknowledged after the backup, gets the database; none of them is lost', async () => {
    const DB = 'r0';
    await createTables(cluster, [DB]);
    const first = (await cluster.placement(ORG, REPO, DB))!;
    const [primary, follower] = [cluster.node(first.primary), cluster.node(first.follower!)];
    const writers = startWriters(cluster, [DB], 2);
    let restartedAt = 0;
    try {
      for (let i = 0; i < 200 && writers.acked.length < 30; i++) await sleep(50);
      const backup = join(work, primary.id);
      assert.equal((await cli(primary, ['backup', backup])).code, 0);
      const backedUp = writers.acked.length;
      for (let i = 0; i < 200 && writers.acked.length < backedUp + 40; i++) await sleep(50);
      assert.ok(writers.acked.length >= backedUp + 40, 'writes acknowledged after the backup');

      // Both nodes go; the primary's lease is revoked rather than waited for (its leader key with it).
      const lease = (await nodeLease(primary))!;
      cluster.kill(primary);
      cluster.kill(follower);
      await cluster.client.revoke(lease);
      const lastAcked = Math.max(...writers.acked.map((a) => a.version));
      assert.equal(Math.max(...eventIds(follower, ORG, REPO, DB).keys()) >= lastAcked, true, 'the follower\'s file holds every acknowledged version');
      // The follower's node comes back first: not in line (a restart), it may not take over, and waits.
      await cluster.start(follower);
      await sleep(cluster.ttlS * 500);
      assert.equal((await cluster.placement(ORG, REPO, DB))!.primary, primary.id, 'the follower not in line did not take over');

      // The operator restores the primary's node from the backup, with the node's environment, and starts it.
      const r = await restore(primary, backup);
      assert.match(r.stderr, new RegExp(`still the recorded primary of 1 database .*\\(${ORG}/${REPO}/${DB}\\)`));
      await cluster.start(primary);
      restartedAt = performance.now();
      await ackedPast(writers, restartedAt, 20);
    } finally {
      await writers.stop();
    }
    assert.ok(writers.acked.some((a) => a.at > restartedAt), `writes got 200 again (placement ${JSON.stringify(await cluster.placement(ORG, REPO, DB))})`);
    const rows = await cluster.proxy.db(REPO, 'query', { database: DB, statements: [{ sql: 'SELECT writer, seq FROM t' }] });
    const have = new Set((rows.json?.results?.[0]?.rows as [number, number][] | undefined ?? []).map(([w, q]) => `${w}/${q}`));
    process.stderr.write(`r0: ${writers.acked.length} acknowledged, ${writers.acked.filter((a) => !have.has(`${a.writer}/${a.seq}`)).length} of them missing\n`);
    await assertAllAcknowledgedKept(cluster, [DB], writers.acked); // before the fix: the rows acknowledged after the backup
    const versions = writers.acked.map((a) => a.version);
    assert.equal(new Set(versions).size, versions.length, 'each version got at most one 200');
    assert.equal((await cluster.placement(ORG, REPO, DB))!.primary, follower.id, 'the follower took the database');
    const log = (primary.proc?.stdout() ?? '') + (primary.proc?.stderr() ?? '');
    assert.match(log, new RegExp(`"level":(50|"error").*"database":"${ORG}/${REPO}/${DB}".*older than its follower's`), 'an error line names the database');
  });

  test('once a follower holds the restore, an older copy past the backup is written over, not given the database', async () => {
    const DB = 'r1';
    await createTables(cluster, [DB]);
    const first = (await cluster.placement(ORG, REPO, DB))!;
    const [primary, follower] = [cluster.node(first.primary), cluster.node(first.follower!)];
    const third = cluster.nodes.find((n) => n !== primary && n !== follower)!;
    const writers = startWriters(cluster, [DB], 2, { first: 10 });
    let restartedAt = 0;
    let thirdKilled = false;
    try {
      for (let i = 0; i < 200 && writers.acked.length < 30; i++) await sleep(50);
      const backup = join(work, `${primary.id}-r1`);
      assert.equal((await cli(primary, ['backup', backup])).code, 0);
      const backedUp = writers.acked.length;
      for (let i = 0; i < 200 && writers.acked.length < backedUp + 40; i++) await sleep(50);
      // Both nodes go, and their leases with them: the restored node finds its follower gone, not asked.
      const leases = [(await nodeLease(primary))!, (await nodeLease(follower))!];
      cluster.kill(primary);
      cluster.kill(follower);
      for (const lease of leases) await cluster.client.revoke(lease);
      await restore(primary, backup);
      await cluster.start(primary);
      restartedAt = performance.now();
      // The third node is named follower and holds the restore: the writes after it are acknowledged on that history.
      assert.ok(await ackedPast(writers, restartedAt, 20) >= 20, `writes got 200 on the restored node (placement ${JSON.stringify(await cluster.placement(ORG, REPO, DB))})`);
      assert.equal((await cluster.placement(ORG, REPO, DB))!.follower, third.id);
      assert.ok(!existsSync(markOf(primary, DB)), 'the mark went once a follower held the restore');
      // The old follower's node comes back with its copy of the lost versions, and is named follower again.
      await cluster.start(follower);
      const lease = (await nodeLease(third))!;
      cluster.kill(third);
      thirdKilled = true;
      await cluster.client.revoke(lease);
      const renamedAt = performance.now();
      for (let i = 0; i < 200 && (await cluster.placement(ORG, REPO, DB))!.follower !== follower.id; i++) await sleep(50);
      assert.ok(await ackedPast(writers, renamedAt, 20) >= 20, 'writes got 200 with the old follower named again');
    } finally {
      await writers.stop();
      if (thirdKilled) await cluster.start(third);
    }
    // What was acknowledged on the restored history (lost if the old copy were given the database).
    await assertAllAcknowledgedKept(cluster, [DB], writers.acked.filter((a) => a.at > restartedAt));
    const p = (await cluster.placement(ORG, REPO, DB))!;
    assert.deepEqual([p.primary, p.follower], [primary.id, follower.id], 'the restored node kept the database, the old follower follows it');
    // The old follower's copy was written over: event by event, it is the primary's.
    for (let i = 0; i < 100 && eventIds(follower, ORG, REPO, DB).size !== eventIds(primary, ORG, REPO, DB).size; i++) await sleep(50);
    assert.deepEqual([...eventIds(follower, ORG, REPO, DB)], [...eventIds(primary, ORG, REPO, DB)]);
  });
});
