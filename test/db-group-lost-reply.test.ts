// A write group whose reply is lost (its executor stopped) tells each caller the truth about its own request. When a
// deferred foreign key fails the group's COMMIT, its requests run again one by one, each committing alone under the
// group's token; a runaway among the later ones used to be stopped after the first had committed, the probe found the
// token, and every caller was told 503 `committed: true`, writes that never committed included. Through the product:
// a libSQL transaction holds the database's writes, so the ones sent meanwhile run as one group, in the order sent.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, type Client } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type HttpResult, type Product } from './helpers/product.ts';
import { pause } from './helpers/runaway.ts';

const LIMIT_MS = 1500;
let p: Product;
let c: Client;

before(async () => {
  // Writes behind the held lane must not be refused while the test lines them up.
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: String(LIMIT_MS), DB_QUEUE_TIMEOUT_MS: '30000' });
  c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/lost/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  const setup = await p.db('web', 'execute', {
    database: 'lost',
    statements: [
      { sql: 'CREATE TABLE a(id INTEGER PRIMARY KEY)' },
      { sql: 'CREATE TABLE b(id INTEGER PRIMARY KEY, a INTEGER REFERENCES a(id) DEFERRABLE INITIALLY DEFERRED)' },
      { sql: 'CREATE TABLE c(x INTEGER PRIMARY KEY)' }, // keyed: a change its changeset carries does not end the group
      { sql: 'INSERT INTO a VALUES (5)' },
    ],
  });
  assert.equal(setup.status, 200, setup.text);
});
after(async () => {
  c.close();
  await p.close();
});

/** Quick while the group's b row is there; endless once it runs alone (the row was the failing request's). */
const RUNAWAY_ALONE = 'INSERT INTO c SELECT CASE WHEN EXISTS (SELECT 1 FROM b) THEN 3 ELSE (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r) END';

test('a group whose COMMIT failed on a deferred foreign key, stopped while its requests ran again alone: only those that committed are told committed: true, the rest get their own answers', async () => {
  const tx = await c.transaction('write');
  await tx.execute('SELECT 1'); // BEGIN is sent: the database's writes wait behind it
  const sent: Promise<HttpResult>[] = [];
  for (const statements of [
    [{ sql: 'INSERT INTO c VALUES (1)' }], // commits alone
    [{ sql: 'INSERT INTO c VALUES (2)' }, { sql: 'INSERT INTO a VALUES (5)' }], // 409 in the group and alone
    [{ sql: 'INSERT INTO b VALUES (1, 99)' }], // breaks the deferred key: the group's COMMIT fails
    [{ sql: RUNAWAY_ALONE }], // stopped at the time limit when it runs alone
  ]) {
    sent.push(p.db('web', 'execute', { database: 'lost', statements }));
    await pause(200); // each reaches the lane before the next: the group runs them in this order
  }
  await tx.rollback();
  const [ok, unique, broken, runaway] = await Promise.all(sent);
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
