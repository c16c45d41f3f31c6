// A write committed on a cluster's primary whose reply was lost (503 `committed: true`) is replicated as a 200's is:
// before, nothing shipped it, so the follower lacked it (a failover then lost a write its caller was told committed)
// and mirror delivery, granted only up to what the follower holds, did not send it, both until the database's next write.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { clusterForSuite, eventIds, type TestCluster } from './helpers/cluster.ts';
import { LOST_GROUP_ENV, loseGroupReply, prepareLostGroup } from './helpers/lost-reply.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

const receiver = new Receiver();
let cluster: TestCluster;
await receiver.start();
clusterForSuite({ nodes: 2, env: { ...LOST_GROUP_ENV, DB_MIRRORS: JSON.stringify([{ name: 'hook', url: receiver.url, secret: newSecret() }]) } }, (c) => {
  cluster = c;
});

test('cluster: a version committed under a lost reply is on the follower before its 503, and reaches the mirror with no further write', async (t) => {
  t.after(() => receiver.stop());
  await prepareLostGroup(cluster.proxy, 'told');
  const placement = (await cluster.placement('acme', 'web', 'told'))!;
  assert.notEqual(placement.follower, null, 'the database has a follower');
  await waitFor(() => receiver.versions('told').includes(1), 5000, 'the setup\'s event');
  const [ok] = await loseGroupReply(cluster.proxy, 'told');
  assert.equal(ok!.json.error?.details?.committed, true, ok!.text);
  assert.equal(eventIds(cluster.node(placement.follower!), 'acme', 'web', 'told').has(2), true, 'the follower holds version 2 once its caller is told it committed (strict durability)');
  await waitFor(() => receiver.versions('told').includes(2), 3000, 'version 2 at the mirror');
  assert.deepEqual(receiver.versions('told'), [1, 2]);
});
