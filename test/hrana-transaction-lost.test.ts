// An interactive transaction lives on a connection of one executor process; a repo's transactions share it. When a
// statement of one of them runs away and the process is stopped, the others are gone too (rolled back by SQLite's
// journal). They were told "shutting down" (a statement queued behind the runaway) or 500 internal "the executor
// stopped while running this request" (one sent after), neither true; now a 503 (UNAVAILABLE on Hrana, SPEC 4.10)
// that says the transaction ended with its process, why, that nothing of it was applied, and to begin it again.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, type Client, type Transaction } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { pause, RUNAWAY } from './helpers/runaway.ts';

let p: Product;
const clients: Client[] = [];
before(async () => {
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: '1500' });
  for (const database of ['d1', 'd2', 'd3']) assert.equal((await p.db('web', 'execute', { database, sql: 'CREATE TABLE t(x)' })).status, 200);
});
after(async () => {
  for (const c of clients) c.close();
  await p.close();
});

async function begin(database: string): Promise<Transaction> {
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  clients.push(c);
  const tx = await c.transaction('write');
  await tx.execute('INSERT INTO t VALUES (1)'); // BEGIN is sent: the transaction is open on the repo's process
  return tx;
}

const failure = (run: Promise<unknown>) => run.then(() => assert.fail('it was answered'), (e: Error & { code?: string }) => e);

test('a runaway of one transaction stops its process: the repo\'s other transactions there are told they ended, and why', async () => {
  const [tx1, tx2, tx3] = [await begin('d1'), await begin('d2'), await begin('d3')];
  const runaway = failure(tx1.execute(RUNAWAY));
  await pause(300);
  const queued = failure(tx2.execute('INSERT INTO t VALUES (2)')); // behind the runaway, on the same process
  const [own, behind] = await Promise.all([runaway, queued]);
  assert.match(behind.message, /this transaction's executor process was stopped because another statement on it ran past its time limit \(DB_QUERY_TIMEOUT_MS\) before this statement ran: the interactive transaction ended with its executor process and was rolled back: nothing of it was applied; begin it again/);
  assert.equal(behind.code, 'UNAVAILABLE');
  const later = await failure(tx3.execute('INSERT INTO t VALUES (3)')); // sent after the process died
  assert.match(later.message, /was stopped because another statement on it ran past its time limit \(DB_QUERY_TIMEOUT_MS\) before this statement ran: the interactive transaction ended/);
  assert.equal(later.code, 'UNAVAILABLE');
  assert.match(own.message, /ran past 1500 ms .*the interactive transaction ended with its executor process and was rolled back: nothing of it was applied/);
  for (const tx of [tx1, tx2, tx3]) await tx.rollback(); // what an ORM sends after an error: nothing is left to undo
  for (const database of ['d1', 'd2', 'd3']) {
    const rows = await p.db('web', 'query', { database, sql: 'SELECT count(*) FROM t' });
    assert.deepEqual(rows.json.results[0].rows, [[0]], `nothing of ${database}'s transaction was applied`);
  }
});
