// A write on a cluster's primary whose reply and probe were both lost (every executor of the node killed, and each
// replacement as it started) is told `committed: null`; the probe is asked again in the background. A version it then
// finds committed reached mirrors but not the follower, which got it only with the database's next write: a failover
// before that lost a committed write. It is now replicated as a 200's is (src/db/service.ts, `onLateCommit`).
// The kill may also fall after the executor's reply, while the node ships it (reading its change log on an executor):
// then the follower's confirmation fails (`committed: null` too), and that version was not shipped again either; it
// now is, as async durability's are (src/cluster/node.ts, `replicated`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { clusterForSuite, eventIds, type TestCluster } from './helpers/cluster.ts';
import { killAtVersion } from './helpers/lost-reply.ts';
import { executorPids, killNewExecutors } from './helpers/processes.ts';
import { waitFor } from './helpers/mirror.ts';
import { pause } from './helpers/runaway.ts';

let cluster: TestCluster;
clusterForSuite({ nodes: 2, env: { DB_QUEUE_TIMEOUT_MS: '1000' } }, (c) => {
  cluster = c;
});

/** 24 MB in one commit: SQLite checkpoints it after the commit, so the version is on disk well before the reply leaves. */
const BIG = 'INSERT INTO big WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 96) SELECT randomblob(262144) FROM n';

test('cluster: a version found committed by the background re-probe reaches the follower with no further write', async (t) => {
  const setup = await cluster.proxy.db('web', 'execute', { database: 'late', sql: 'CREATE TABLE big(x BLOB)' });
  assert.equal(setup.status, 200, setup.text);
  const placement = (await cluster.placement('acme', 'web', 'late'))!;
  assert.notEqual(placement.follower, null, 'the database has a follower');
  const primary = cluster.node(placement.primary);
  const follower = cluster.node(placement.follower!);
  const root = primary.proc!.child.pid!;
  const file = join(primary.dataDir, 'db', 'acme', 'web', 'late.sqlite');
  let lost = 0;
  // The kill may come after the reply left (a 200, replicated as any): then the next version is tried.
  for (let version = 2; version <= 5 && lost === 0; version++) {
    const killing = killNewExecutors(root); // the primary's replacements die too: its probe is lost three times and fails
    try {
      const exited = once(killAtVersion(file, version, executorPids(root)), 'exit');
      const res = await cluster.proxy.db('web', 'execute', { database: 'late', sql: BIG });
      await exited;
      if (res.status !== 200) {
        assert.equal(res.json?.error?.details?.committed, null, res.text);
        lost = version;
        t.diagnostic(`lost at version ${version}: ${res.json.error.message}`); // which of the two ways
      }
    } finally {
      killing.stop();
    }
  }
  assert.ok(lost > 0, 'no reply was lost');
  // The re-probe asks 1 s after the failed probe, then 2 s, 4 s, 8 s later: well within this.
  await waitFor(async () => (await pause(100), eventIds(follower, 'acme', 'web', 'late').has(lost)), 20_000, `version ${lost} on the follower`);
  const now = await cluster.proxy.db('web', 'query', { database: 'late', sql: 'SELECT count(*) FROM big' });
  assert.equal(now.json.version, lost, 'it committed, and nothing was written since');
});
