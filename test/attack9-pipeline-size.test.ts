// Attack round 9, the libSQL protocol (SPEC 4.10): what one pipeline answers grew without bound. A pipeline of `{}`
// requests got one ~200-byte error each (30 MB of them: 10 million results, 136 s of one core and 3.8 GB, then a
// 500); and `describe` results, named after the statement's text, were not counted against DB_MAX_RESULT_BYTES,
// so one stored text described by its sql_id over and over made a reply many times the limit. And stored SQL named
// by sql_id was read on the event loop at every use: 3,000 `sequence` requests naming one 900 KB text held every
// org's requests 47 s.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

const MAX_RESULT = 64 * 1024;
/** The documented bound (docs/clients.md; MAX_PIPELINE_REQUESTS in src/db/hrana/index.ts). */
const MAX_PIPELINE_REQUESTS = 10_000;
let p: Product;
const pipeline = (body: unknown) => p.call('/web/_db/v2/pipeline', { body, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });

before(async () => {
  p = await startProduct({ DB_MAX_RESULT_BYTES: String(MAX_RESULT) });
});
after(() => p.close());

test(`a pipeline of more than ${MAX_PIPELINE_REQUESTS} requests: 413 before any runs, the stream untouched; ${MAX_PIPELINE_REQUESTS} are answered`, async () => {
  const open = await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }] });
  assert.equal(open.status, 200, open.text);
  const before = (await p.db('web', 'status', {})).json.version;
  const write = { type: 'execute', stmt: { sql: 'INSERT INTO t VALUES (1)' } };
  const tooMany = await pipeline({ baton: open.json.baton, requests: [write, ...Array.from({ length: MAX_PIPELINE_REQUESTS }, () => ({}))] });
  assert.equal(tooMany.status, 413, tooMany.text.slice(0, 300));
  assert.equal(tooMany.json.error.code, 'payload_too_large');
  assert.match(tooMany.json.error.message, new RegExp(`at most ${MAX_PIPELINE_REQUESTS} requests, got ${MAX_PIPELINE_REQUESTS + 1}; nothing of it ran`));
  assert.equal((await p.db('web', 'status', {})).json.version, before, 'its first request, a write, did not run');
  const next = await pipeline({ baton: open.json.baton, requests: Array.from({ length: MAX_PIPELINE_REQUESTS }, () => ({ type: 'get_autocommit' })) });
  assert.equal(next.status, 200, 'the baton of the refused pipeline still names its stream');
  assert.equal(next.json.results.length, MAX_PIPELINE_REQUESTS);
});

test('describe results count against DB_MAX_RESULT_BYTES across the pipeline: past it they are SQLITE_TOOBIG, and the reply stays near the limit', async () => {
  const name = 'c'.repeat(20_000); // a column named after 20 KB of the statement's text: each description holds it
  const describes = Array.from({ length: 40 }, () => ({ type: 'describe', sql_id: 1 }));
  const res = await pipeline({ baton: null, requests: [{ type: 'store_sql', sql_id: 1, sql: `SELECT 1 AS "${name}"` }, ...describes, { type: 'close' }] });
  assert.equal(res.status, 200, res.text.slice(0, 300));
  const results = res.json.results.slice(1, -1) as { type: string; response?: { result: { cols: { name: string }[] } }; error?: { code: string; message: string } }[];
  const ok = results.filter((r) => r.type === 'ok');
  assert.ok(ok.length >= 1 && ok.length <= Math.ceil(MAX_RESULT / name.length) + 1, `${ok.length} descriptions answered`);
  assert.equal(ok[0]!.response!.result.cols[0]!.name, name);
  for (const r of results.slice(ok.length)) {
    assert.equal(r.error?.code, 'SQLITE_TOOBIG');
    assert.match(r.error!.message, /over DB_MAX_RESULT_BYTES/);
  }
  assert.ok(Buffer.byteLength(res.text) < 2 * MAX_RESULT, `a reply of ${Buffer.byteLength(res.text)} bytes (40 descriptions were ~800 KB)`);
});

test('so do those of a transaction\'s describe', async () => {
  const name = 'd'.repeat(20_000);
  const describes = Array.from({ length: 40 }, () => ({ type: 'describe', sql_id: 1 }));
  const res = await pipeline({ baton: null, requests: [{ type: 'store_sql', sql_id: 1, sql: `SELECT 1 AS "${name}"` }, { type: 'execute', stmt: { sql: 'BEGIN' } }, ...describes, { type: 'execute', stmt: { sql: 'ROLLBACK' } }, { type: 'close' }] });
  assert.equal(res.status, 200, res.text.slice(0, 300));
  const results = res.json.results.slice(2, -2) as { type: string; error?: { code: string } }[];
  assert.ok(results.filter((r) => r.type === 'ok').length <= Math.ceil(MAX_RESULT / name.length) + 1);
  assert.equal(results.at(-1)!.error?.code, 'SQLITE_TOOBIG');
  assert.ok(Buffer.byteLength(res.text) < 2 * MAX_RESULT, `a reply of ${Buffer.byteLength(res.text)} bytes`);
});

test('stored SQL read by sql_id counts against DB_MAX_BODY_BYTES across the pipeline, and other orgs are answered meanwhile', async () => {
  const text = 'SELECT 1;'.repeat(100_000); // 900,000 characters, stored once, named by 3,000 requests: 2.7 billion to read
  const requests = [{ type: 'store_sql', sql_id: 1, sql: text }, ...Array.from({ length: 3000 }, () => ({ type: 'sequence', sql_id: 1 })), { type: 'close' }];
  let worst = 0;
  let polling = true;
  const poll = (async () => {
    while (polling) {
      const t = performance.now();
      const r = await p.db('other', 'status', {}, { org: 'else' });
      assert.equal(r.status, 200, r.text);
      worst = Math.max(worst, performance.now() - t);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const res = await pipeline({ baton: null, requests });
  polling = false;
  await poll;
  assert.equal(res.status, 200, res.text.slice(0, 300));
  const results = res.json.results.slice(1, -1) as { type: string; error?: { code: string; message: string } }[];
  const uses = Math.floor(p.config.db.maxBodyBytes / text.length);
  // Each use runs as a write of 100,000 statements, refused (DB_MAX_STATEMENTS): the text was read for it all the same.
  for (const r of results.slice(0, uses)) assert.match(r.error!.message, /at most 100 statements/);
  for (const r of results.slice(uses)) {
    assert.equal(r.error?.code, 'SQLITE_TOOBIG');
    assert.match(r.error.message, /named by sql_id come to more than DB_MAX_BODY_BYTES/);
  }
  assert.ok(worst < 2000, `another org's status waited ${Math.round(worst)} ms`);
});
