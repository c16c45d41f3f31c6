// A write whose executor process dies under it (killed from outside, crashed) before it committed runs again while
// its deadline (DB_QUERY_TIMEOUT_MS from the run first cut short) allows, three times at most, as a read does: the
// probe says it did not commit, so a rerun cannot apply it twice. It ran again once, and a second loss was the
// caller's 500 (`the executor stopped while running this request`).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { busiestExecutor } from './helpers/processes.ts';
import { pause } from './helpers/runaway.ts';

/** A write of a few seconds' work: long enough to be killed twice, well within the limit. */
const LONG_WRITE = 'INSERT INTO t SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000000) SELECT x FROM c)';

let p: Product;
before(async () => {
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: '60000' }); // the deadline is not what this guards
  assert.equal((await p.db('web', 'execute', { database: 'w', sql: 'CREATE TABLE t(x)' })).status, 200);
});
after(() => p.close());

/** SIGKILLs the executor running the long write after `ms` (its rerun may still wait for one: looked for 5 s); false if none runs it. */
async function killTheWrite(ms: number): Promise<boolean> {
  await pause(ms);
  for (const until = performance.now() + 5000; performance.now() < until;) {
    const pid = await busiestExecutor();
    if (pid === undefined) continue;
    process.kill(pid, 'SIGKILL');
    return true;
  }
  return false;
}

test('a write whose executor is killed twice before it commits is answered 200, applied once (it got 500)', async () => {
  const write = p.db('web', 'execute', { database: 'w', sql: LONG_WRITE });
  const killed = [await killTheWrite(300), await killTheWrite(1200)];
  const res = await write;
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(killed, [true, true], 'its executor was killed under it twice');
  const rows = await p.db('web', 'query', { database: 'w', sql: 'SELECT x FROM t' });
  assert.deepEqual(rows.json.results[0].rows, [[20000000]], 'applied exactly once');
});
