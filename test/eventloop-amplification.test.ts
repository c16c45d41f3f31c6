// Work a crafted request puts on the main process's event loop (every org's requests wait behind it): each case cost
// far more per byte than reading its body does. A quiet org's status is timed back to back while the crafted one runs.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { call, ROOT_KEY, spawnProduct, tempDir, testEnv, type HttpResult, type SpawnedProduct } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

// A process of its own: the test's own work (bodies of 30 MB) must not be what holds the loop measured.
let p: SpawnedProduct;
const dataDir = tempDir();
before(async () => {
  p = await spawnProduct(testEnv(dataDir, { DB_QUERY_TIMEOUT_MS: '2000' }));
});
after(() => {
  p.killAll();
  rmSync(dataDir, { recursive: true, force: true });
});

function db(org: string, repo: string, op: string, body: Buffer): Promise<HttpResult> {
  return call(p.url, 'localhost', `/${repo}/_db/${op}`, { org, method: 'POST', rawBody: body, headers: { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), org, repo)}`, 'content-type': 'application/json' } });
}

/** The attack's answer, and the longest a quiet org went without an answer while it ran. */
async function whileQuietWaits<T>(attack: () => Promise<T>): Promise<{ result: T; worstMs: number; tookMs: number }> {
  const status = Buffer.from('{}');
  let done = false;
  let worstMs = 0;
  const probe = (async () => {
    let since = performance.now();
    while (!done) {
      const r = await db('other', 'quiet', 'status', status);
      if (r.status !== 200 && r.status !== 503) assert.fail(r.text);
      if (r.status === 503) continue;
      worstMs = Math.max(worstMs, performance.now() - since);
      since = performance.now();
    }
  })();
  await new Promise((r) => setTimeout(r, 50));
  const t = performance.now();
  const result = await attack();
  const tookMs = performance.now() - t;
  done = true;
  await probe;
  return { result, worstMs, tookMs };
}

const LIMIT_MS = 1000;

/** One libSQL pipeline of `request` then close, timed against a quiet org's status. */
async function pipeline(request: unknown): Promise<{ result: HttpResult; worstMs: number; tookMs: number }> {
  const body = Buffer.from(JSON.stringify({ requests: [request, { type: 'close' }] }));
  return whileQuietWaits(() => db('acme', 'web', 'v2/pipeline', body));
}

test('a libSQL RELEASE outside a transaction, then 15 million words: its error named the word by splitting the whole text (1.5 s for 30 MB)', async () => {
  const { result, worstMs, tookMs } = await pipeline({ type: 'execute', stmt: { sql: `RELEASE ${'a '.repeat(15_000_000)}` } });
  assert.equal(result.status, 200, result.text.slice(0, 300));
  assert.equal(result.json.results[0].error.message, 'RELEASE only inside a transaction: BEGIN first (a request outside one is its own transaction)');
  assert.ok(worstMs < LIMIT_MS, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms)`);
});
