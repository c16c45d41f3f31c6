// SPEC 4.10 with 4.8's bounded waits: two interactive transactions on one database, with the real @libsql/client.
// The second BEGIN waits for the first as writes do, at most DB_QUEUE_TIMEOUT_MS, then fails as they do (503
// `unavailable`, `UNAVAILABLE` on Hrana; never SQLITE_BUSY). It used to wait until the first ended: up to
// DB_TRANSACTION_MAX_MS (30 s).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createClient, LibsqlError, type Client } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';

describe('a second interactive transaction on a database another one holds (@libsql/client)', () => {
  let p: Product;
  const client = (database: string): Client =>
    createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  before(async () => {
    p = await startProduct({ DB_QUEUE_TIMEOUT_MS: '500' });
  });
  after(() => p.close());

  test('its BEGIN waits for a first one that ends in time, then runs', async () => {
    const [a, b] = [client('short'), client('short')];
    await a.execute('CREATE TABLE t(x)');
    const first = await a.transaction('write');
    await first.execute('INSERT INTO t VALUES (1)');
    setTimeout(() => void first.commit(), 200);
    const second = await b.transaction('write');
    await second.execute('INSERT INTO t VALUES (2)');
    await second.commit();
    assert.deepEqual((await a.execute('SELECT x FROM t ORDER BY x')).rows.map((r) => r.x), [1, 2]);
    a.close();
    b.close();
  });

  test('behind one held open, its BEGIN fails after DB_QUEUE_TIMEOUT_MS with UNAVAILABLE, saying why (it waited until the first ended, up to DB_TRANSACTION_MAX_MS); the first goes on', async () => {
    const [a, b] = [client('held'), client('held')];
    await a.execute('CREATE TABLE t(x)');
    const first = await a.transaction('write');
    await first.execute('INSERT INTO t VALUES (1)');
    const t0 = performance.now();
    const second = await b.transaction('write'); // its BEGIN is sent with its first statement
    const refused = await second.execute('INSERT INTO t VALUES (2)').then(() => null, (e: unknown) => e);
    const waited = performance.now() - t0;
    second.close();
    assert.ok(refused instanceof LibsqlError, `the second BEGIN failed: ${String(refused)}`);
    assert.equal(refused.code, 'UNAVAILABLE', refused.message);
    assert.match(refused.message, /interactive transaction \(a libSQL stream\) open for \d+ ms; this BEGIN waited 500 ms \(DB_QUEUE_TIMEOUT_MS\)/);
    assert.ok(waited >= 400 && waited < 2500, `refused after ${waited.toFixed(0)} ms`);
    await first.execute('INSERT INTO t VALUES (3)');
    await first.commit();
    const third = await b.transaction('write'); // the database's writes are free again
    await third.execute('INSERT INTO t VALUES (4)');
    await third.commit();
    assert.deepEqual((await a.execute('SELECT x FROM t ORDER BY x')).rows.map((r) => r.x), [1, 3, 4], 'nothing of the refused one ran');
    a.close();
    b.close();
  });
});
