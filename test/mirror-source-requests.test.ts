// What the reference mirror asks of its source (SPEC 4.9) for what its readers do (SPEC 6), counted by a proxy in
// front of the source: reads of a database the source lacks, and a pull that finds the source's history pruned.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { startProduct, type HttpResult, type Product } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { CountingProxy, newSecret, waitFor } from './helpers/mirror.ts';
import { ABSENT_FOR_MS } from '../src/mirror/reference/absent.ts';
import { PULL_AFTER_MS } from '../src/mirror/reference/query.ts';

const SNAPSHOT = '/web/_db/snapshot';

/** The source, a counting proxy in front of it, and `serve mirror` taking snapshots through the proxy. */
async function setup(t: TestContext, listed: boolean): Promise<{ source: Product; proxy: CountingProxy; mirror: Product; read: (body: Record<string, unknown>) => Promise<HttpResult> }> {
  const secret = newSecret();
  const mirrorPort = await freePort();
  const source = await startProduct(listed ? { DB_MIRRORS: JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${mirrorPort}/hook`, secret }]), DB_MIRROR_MAX_BACKOFF_MS: '100' } : {});
  const proxy = await new CountingProxy(source.url).start();
  const mirror = await startProduct({ MIRROR_PORT: String(mirrorPort), MIRROR_SECRET: secret, MIRROR_SOURCE_URL: proxy.url }, 'mirror');
  t.after(async () => {
    await mirror.close();
    await proxy.stop();
    await source.close();
  });
  const read = (body: Record<string, unknown>) => mirror.call('/web/_db/query', { body: { sql: 'SELECT 1', ...body }, headers: { authorization: `Bearer ${mirror.secret('acme', 'web')}` } });
  return { source, proxy, mirror, read };
}

function notFound(r: HttpResult): void {
  assert.equal(r.status, 404, r.text);
  assert.deepEqual(r.json, { error: { code: 'database_not_found', message: 'database ghost does not exist (the source of this mirror has none)' } });
}

test('reads of a database the source lacks ask it once: 50 at once share the question, later ones reuse the answer for a moment', async (t) => {
  const { proxy, read } = await setup(t, false);
  (await Promise.all(Array.from({ length: 50 }, () => read({ database: 'ghost' })))).forEach(notFound);
  assert.equal(proxy.count(SNAPSHOT), 1, '50 concurrent reads, one question to the source');
  const started = performance.now();
  for (let i = 0; i < 20; i++) notFound(await read({ database: 'ghost' }));
  if (performance.now() - started < ABSENT_FOR_MS) assert.equal(proxy.count(SNAPSHOT), 1, '20 more reads at once after it, none');
  await new Promise((r) => setTimeout(r, ABSENT_FOR_MS + 100));
  notFound(await read({ database: 'ghost' }));
  assert.equal(proxy.count(SNAPSHOT), 2, 'the answer is remembered only for a moment');
});

test('a database the source lacked, then written: its event clears the remembered 404 at once', async (t) => {
  const { source, read } = await setup(t, true);
  notFound(await read({ database: 'ghost' }));
  const at = performance.now();
  const w = await source.db('web', 'execute', { database: 'ghost', statements: [{ sql: 'CREATE TABLE t (v)' }, { sql: "INSERT INTO t VALUES ('here')" }] });
  assert.equal(w.status, 200, w.text);
  let last: HttpResult | undefined;
  await waitFor(async () => (last = await read({ database: 'ghost', sql: 'SELECT v FROM t' })).status === 200, 5000, 'the replica');
  assert.deepEqual(last!.json.results[0].rows, [['here']]);
  // Only meaningful within the moment the 404 is remembered (a loaded machine may take longer: then it proves nothing).
  t.diagnostic(`readable ${Math.round(performance.now() - at)} ms after the write (the 404 is remembered ${ABSENT_FOR_MS} ms)`);
});

test('a pull that finds the events after its replica pruned at the source takes a snapshot at once, without the 2 s hold for a gap', async (t) => {
  const { source, proxy, read } = await setup(t, false); // not in DB_MIRRORS: only pulls bring events
  assert.equal((await source.db('web', 'execute', { sql: 'CREATE TABLE t (v)' })).json.version, 1);
  assert.equal((await read({ minVersion: 1 })).status, 200); // the replica, at 1
  for (let i = 0; i < 5; i++) await source.db('web', 'execute', { sql: 'INSERT INTO t VALUES (?)', params: [i] });
  // Retention dropped 1..3 (as pruning does after 1,000 events and 7 days).
  const file = new DatabaseSync(join(source.dataDir, 'db', 'acme', 'web', 'main.sqlite'));
  file.exec('DELETE FROM _scopebase_changes WHERE version <= 3');
  file.close();
  assert.equal((await source.db('web', 'changes', { since: 1 })).status, 410);
  const changesBefore = proxy.count('/web/_db/changes');
  const started = performance.now();
  const r = await read({ sql: 'SELECT count(*) FROM t', minVersion: 6 });
  const took = performance.now() - started;
  t.diagnostic(`answered in ${Math.round(took)} ms (the pull starts after ${PULL_AFTER_MS} ms)`);
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { results: [{ columns: ['count(*)'], rows: [[5]] }], version: 6 });
  assert.equal(proxy.count('/web/_db/changes') - changesBefore, 1, 'one page asked for (it said gone), then the snapshot');
  assert.ok(took < PULL_AFTER_MS + 1500, `answered in ${Math.round(took)} ms`);
});
