// A read whose executor process dies under it (killed from outside, crashed) runs again elsewhere while its deadline
// (DB_QUERY_TIMEOUT_MS from its first start) allows: reads change nothing. It ran again once, and a second loss was the
// caller's 500; a rerun was also judged by its first wait for an executor, so one that had run a second was refused
// 503 at once. A read stopped for its own limits (its time, its temporary files, its memory) is not run again.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { busiestExecutor } from './helpers/processes.ts';
import { pause, RUNAWAY, setupWrite } from './helpers/runaway.ts';

/** A read of a few seconds: long enough to be killed twice, well within the limit. */
const LONG_READ = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000000) SELECT count(*) FROM c';

let p: Product;
before(async () => {
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: '60000' }); // the deadline is not what this guards
  assert.equal((await p.db('web', 'execute', { database: 'r', sql: 'CREATE TABLE t(x)' })).status, 200);
});
after(() => p.close());

/** SIGKILLs the executor running the long read after `ms`; false if none runs it. */
async function killTheRead(ms: number): Promise<boolean> {
  await pause(ms);
  let pid = await busiestExecutor();
  // A loaded machine may not have started the read (or its rerun) yet: later is still past the queue limit.
  for (let i = 0; i < 10 && pid === undefined; i++) pid = await busiestExecutor();
  if (pid !== undefined) process.kill(pid, 'SIGKILL');
  return pid !== undefined;
}

test('a read whose executor is killed twice while it runs is answered 200 (it got 503 or 500)', async () => {
  const read = p.db('web', 'query', { database: 'r', sql: LONG_READ });
  // The second run is killed past DB_QUEUE_TIMEOUT_MS (1 s) after the read first asked for an executor.
  const killed = [await killTheRead(300), await killTheRead(1200)];
  const res = await read;
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json.results[0].rows, [[20000000]]);
  assert.deepEqual(killed, [true, true], 'its executor was killed under it twice');
});

test('a read that runs away itself is stopped once, not run again', async () => {
  const q = await startProduct({ DB_QUERY_TIMEOUT_MS: '500' });
  try {
    const setup = await setupWrite(() => q.db('web', 'execute', { database: 'r', sql: 'CREATE TABLE t(x)' }));
    assert.equal(setup.status, 200, setup.text);
    const t0 = performance.now();
    const res = await q.db('web', 'query', { database: 'r', sql: RUNAWAY });
    assert.equal(res.json?.error?.code, 'query_timeout', res.text);
    assert.ok(performance.now() - t0 < 5000, 'stopped at its limit, not run again');
  } finally {
    await q.close();
  }
});
