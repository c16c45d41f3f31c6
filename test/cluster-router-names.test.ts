// The proxy's router in a cluster: what a tenant's database names cost the proxy's memory. It keeps each new name it
// sends to a node for a few seconds (router.ts, `pending`): a name that is no database name must not be kept.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { clusterForSuite, type TestCluster } from './helpers/cluster.ts';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;
const heap = () => {
  gc();
  return process.memoryUsage().heapUsed;
};

describe('cluster router: database names a tenant sends', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 1 }, (c) => (cluster = c));

  test('bodies naming huge invalid databases are refused, and the proxy keeps none of them', async () => {
    const before = heap();
    const big = 'x'.repeat(4 * 1024 * 1024);
    for (let i = 0; i < 40; i++) {
      const res = await cluster.proxy.db('web', 'query', { database: `${big}${i}`, sql: 'SELECT 1' });
      assert.equal(res.status, 400, res.text.slice(0, 300));
      assert.equal(res.json.error.code, 'invalid_name');
    }
    const grown = heap() - before;
    assert.ok(grown < 32 * 1024 * 1024, `the proxy held on to ${Math.round(grown / 1024 / 1024)} MiB of names it never placed`);
  });
});

describe('cluster router: a body nesting millions of arrays', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 1 }, (c) => (cluster = c));

  test('is refused without being parsed on the proxy (its JSON.parse, to find the database, held every org 7 s)', async () => {
    const body = `{"sql":"SELECT 1","params":${'['.repeat(16_000_000)}${']'.repeat(16_000_000)}}`;
    const t = performance.now();
    const res = await cluster.proxy.db('web', 'query', undefined, { rawBody: Buffer.from(body) });
    const tookMs = performance.now() - t;
    assert.equal(res.status, 400, res.text.slice(0, 300));
    assert.equal(res.json.error.message, 'the JSON body nests deeper than 64 levels');
    assert.ok(tookMs < 3000, `answered in ${Math.round(tookMs)} ms`);
  });
});
