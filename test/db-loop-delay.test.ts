// SPEC 3 and 4.8: a database service whose event loop runs late answers 503 unavailable with Retry-After at once
// (nothing ran), rather than serving every request late; once the loop keeps time again it serves as before.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct } from './helpers/product.ts';

/** Keeps this process's event loop (the in-process product's) about `lateMs` late, until the returned stop is called. */
function holdLoop(lateMs: number): () => void {
  let on = true;
  const block = () => {
    if (!on) return;
    const until = performance.now() + lateMs;
    while (performance.now() < until); // the loop is busy: every timer of the product runs this late
    setTimeout(block, 1);
  };
  setTimeout(block, 1);
  return () => {
    on = false;
  };
}

test('a late event loop past DB_MAX_LOOP_DELAY_MS sheds with 503 and Retry-After; on time again, the same request is served', async (t) => {
  const p = await startProduct({ DB_MAX_LOOP_DELAY_MS: '50' });
  t.after(() => p.close());
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
  const stop = holdLoop(120);
  let refused;
  try {
    await new Promise((r) => setTimeout(r, 500)); // three 100-ms windows, each of them late
    refused = await p.db('web', 'execute', { sql: 'INSERT INTO t VALUES (1)' });
  } finally {
    stop();
  }
  assert.equal(refused.status, 503, refused.text);
  assert.equal(refused.json.error.code, 'unavailable');
  assert.match(refused.json.error.message, /event loop runs over 50 ms late \(DB_MAX_LOOP_DELAY_MS\)/);
  assert.equal(refused.json.error.details.committed, false);
  assert.equal(refused.headers['retry-after'], '1');
  await new Promise((r) => setTimeout(r, 500)); // three windows on time
  const served = await p.db('web', 'execute', { sql: 'INSERT INTO t VALUES (1)' });
  assert.equal(served.status, 200, served.text);
  const rows = await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' });
  assert.deepEqual(rows.json.results[0].rows, [[1]], 'the refused insert wrote nothing');
});
