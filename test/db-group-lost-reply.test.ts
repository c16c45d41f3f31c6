// A write group whose reply is lost (its executor stopped) tells each caller the truth about its own request. When a
// deferred foreign key fails the group's COMMIT, its requests run again one by one, each committing alone under the
// group's token; a runaway among the later ones used to be stopped after the first had committed, the probe found the
// token, and every caller was told 503 `committed: true`, writes that never committed included. And what committed
// under the lost reply is reported as a 200's version is: the mirrors got its event only at the database's next write.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { executorPids } from './helpers/processes.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { killAtVersion, LOST_GROUP_ENV, loseGroupReply, prepareLostGroup } from './helpers/lost-reply.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

let p: Product;
const receiver = new Receiver();

before(async () => {
  await receiver.start();
  p = await startProduct({ ...LOST_GROUP_ENV, DB_MIRRORS: JSON.stringify([{ name: 'hook', url: receiver.url, secret: newSecret() }]) });
});
after(async () => {
  await p.close();
  await receiver.stop();
});

test('a group whose COMMIT failed on a deferred foreign key, stopped while its requests ran again alone: only those that committed are told committed: true, the rest get their own answers', async () => {
  await prepareLostGroup(p, 'lost');
  const [ok, unique, broken, runaway] = await loseGroupReply(p, 'lost');
  assert.equal(ok!.status, 503, ok!.text);
  assert.equal(ok!.json.error.details.committed, true, 'its reply was lost after it committed');
  assert.equal(unique!.status, 409, `it failed and nothing of it was applied: ${unique!.text}`);
  assert.match(unique!.json.error.message, /UNIQUE constraint failed: a\.id/);
  assert.equal(broken!.status, 409, `it failed at its COMMIT: ${broken!.text}`);
  assert.equal(broken!.json.error.details.sqliteCode, 'SQLITE_CONSTRAINT_FOREIGNKEY');
  assert.equal(runaway!.status, 422, `it never committed, and ran away alone: ${runaway!.text}`);
  assert.equal(runaway!.json.error.code, 'query_timeout');
  const rows = await p.db('web', 'query', { database: 'lost', sql: 'SELECT (SELECT group_concat(x) FROM (SELECT x FROM c ORDER BY x)), (SELECT count(*) FROM b), (SELECT group_concat(id) FROM a)' });
  assert.deepEqual(rows.json.results[0].rows[0], ['1', 0, '5'], 'what committed is what callers were told committed');
});

test('a version committed under a lost reply reaches the mirror with no further write, as a 200\'s does', async () => {
  await prepareLostGroup(p, 'told');
  await waitFor(() => receiver.versions('told').includes(1), 5000, 'the setup\'s event');
  const [ok] = await loseGroupReply(p, 'told');
  assert.equal(ok!.json.error?.details?.committed, true, ok!.text);
  // Delivery starts at the commit's notice (milliseconds); before, it waited for the database's next write.
  await waitFor(() => receiver.versions('told').includes(2), 3000, 'version 2 at the mirror');
  assert.deepEqual(receiver.versions('told'), [1, 2]);
});

test('an interactive COMMIT whose reply was lost (its executor killed after it committed) reaches the mirror with no further write', async (t) => {
  assert.equal((await p.db('web', 'execute', { database: 'txlost', sql: 'CREATE TABLE big(x BLOB)' })).status, 200);
  await waitFor(() => receiver.versions('txlost').includes(1), 5000, 'the setup\'s event');
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/txlost/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  t.after(() => c.close());
  // The kill may come after the reply left (a 200): then the next version is tried.
  let lost: number | null = null;
  for (let version = 2; version <= 5 && lost === null; version++) {
    const tx = await c.transaction('write');
    await tx.execute('INSERT INTO big WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 96) SELECT randomblob(262144) FROM n');
    const watcher = killAtVersion(join(p.dataDir, 'db', 'acme', 'web', 'txlost.sqlite'), version, executorPids());
    const exited = once(watcher, 'exit');
    const failed = await tx.commit().then(() => null, (e: Error) => e);
    await exited;
    if (failed !== null) {
      assert.match(failed.message, /the executor stopped during this transaction's commit; it committed/);
      lost = version;
    }
  }
  assert.notEqual(lost, null, 'a COMMIT whose reply was lost');
  const now = await p.db('web', 'query', { database: 'txlost', sql: 'SELECT 1' });
  assert.equal(now.json.version, lost, 'it committed');
  await waitFor(() => receiver.versions('txlost').includes(lost!), 3000, `version ${lost} at the mirror`);
});
