// Runaway statements and the requests around them (SPEC 4.8: a statement past DB_QUERY_TIMEOUT_MS is stopped and gets
// 422 query_timeout, "while requests to other databases go on unhindered").
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct } from './helpers/product.ts';

const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';

describe('a quick read sent together with a runaway, down the same pipe', () => {
  test('is answered when it is done, not held until the runaway is stopped (it got 422 query_timeout, as if it were the runaway)', async () => {
    // One process: both go down its pipe in one write, the read first. The executor ran both from one chunk and sent
    // their replies at its end; the read's waited behind the runaway, and the parent stopped the process at the read's
    // limit, the read's reply still unsent.
    const p = await startProduct({ DB_EXECUTORS: '1', DB_QUERY_TIMEOUT_MS: '1000', DB_QUEUE_TIMEOUT_MS: '5000' });
    try {
      await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
      for (let round = 0; round < 3; round++) {
        const t0 = performance.now();
        const [quick, runaway] = await Promise.all([
          p.db('web', 'query', { sql: 'SELECT count(*) FROM t' }).then((r) => ({ r, ms: performance.now() - t0 })),
          p.db('web', 'query', { sql: RUNAWAY }),
        ]);
        assert.equal(quick.r.status, 200, quick.r.text);
        assert.ok(quick.ms < 900, `answered after ${quick.ms.toFixed(0)} ms, not at the runaway's 1000 ms limit`);
        assert.equal(runaway.json?.error?.code, 'query_timeout', runaway.text);
      }
    } finally {
      await p.close();
    }
  });
});
