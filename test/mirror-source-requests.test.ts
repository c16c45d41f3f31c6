// What the reference mirror asks of its source (SPEC 4.9) for what its readers do (SPEC 6), counted by a proxy in
// front of the source: reads of a database the source lacks, and a pull that finds the source's history pruned.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type HttpResult, type Product } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { CountingProxy, newSecret, waitFor } from './helpers/mirror.ts';
import { ABSENT_FOR_MS } from '../src/mirror/reference/absent.ts';

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
