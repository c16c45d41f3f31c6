// Runaway statements and the requests around them (SPEC 4.8: a statement past DB_QUERY_TIMEOUT_MS is stopped and gets
// 422 query_timeout, "while requests to other databases go on unhindered").
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct } from './helpers/product.ts';

const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('a read sent behind its repo\'s runaway while the repo\'s share is full', () => {
  test('is refused at DB_QUEUE_TIMEOUT_MS, not held until the runaway is stopped', async () => {
    const p = await startProduct({ DB_EXECUTORS: '2', DB_EXECUTORS_PER_REPO: '1', DB_QUERY_TIMEOUT_MS: '3000', DB_QUEUE_TIMEOUT_MS: '300' });
    try {
      await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
      const first = p.db('web', 'query', { sql: RUNAWAY });
      await pause(200); // the repo's one process runs it
      // Sent together: the read goes down a pipe behind a runaway, before it is known to be slow.
      const second = p.db('web', 'query', { sql: RUNAWAY });
      const t0 = performance.now();
      const read = await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' });
      const waited = performance.now() - t0;
      if (read.status !== 200) {
        assert.equal(read.status, 503, read.text);
        assert.equal(read.json.error.details.committed, false);
      }
      assert.ok(waited < 1500, `answered after ${waited.toFixed(0)} ms (${read.status}), not at the runaway's 3000 ms limit`);
      assert.equal((await first).json?.error?.code, 'query_timeout');
      const stopped = await second; // stopped at its limit, or refused as the read was (it waited behind the first)
      assert.ok(stopped.json?.error?.code === 'query_timeout' || stopped.json?.error?.details?.committed === false, stopped.text);
    } finally {
      await p.close();
    }
  });
});

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
