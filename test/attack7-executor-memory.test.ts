// Attack round 7: a statement's memory in its executor process was bounded by nothing but its time limit. One read
// of a row of many copies of an 8 MB value (`SELECT b, b, … FROM (SELECT zeroblob(8e6) AS b)`: SQLite's length limit
// bounds each value, not a row of 2,000) had node:sqlite copy every column out, 1–2 GB a second: gigabytes per
// process, on each of a repo's processes at once, before the result limit refused it. DB_MEMORY_MAX_BYTES stops it.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { executorPids } from './helpers/processes.ts';
import { residentBytes } from '../src/db/executor/memory.ts';

const LIMIT = 256 * 1024 * 1024;
let p: Product;
before(async () => {
  // A time limit long enough that only the memory limit can stop the statement.
  p = await startProduct({ DB_MEMORY_MAX_BYTES: String(LIMIT), DB_QUERY_TIMEOUT_MS: '30000' });
  await p.db('web', 'execute', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' });
});
after(() => p.close());

/** The largest resident memory of any executor process while `run` runs (sampled every 10 ms). */
async function peakExecutorBytes<T>(run: () => Promise<T>): Promise<{ result: T; peak: number }> {
  let peak = 0;
  const timer = setInterval(() => {
    for (const pid of executorPids()) peak = Math.max(peak, residentBytes(pid) ?? 0);
  }, 10);
  try {
    return { result: await run(), peak };
  } finally {
    clearInterval(timer);
  }
}

const wideRow = (columns: number) => `WITH x(b) AS (SELECT zeroblob(8000000)) SELECT ${Array(columns).fill('b').join(', ')} FROM x`;

test('a row of 100 copies of an 8 MB value is stopped at DB_MEMORY_MAX_BYTES with 507, and the repo goes on', async () => {
  const { result: r, peak } = await peakExecutorBytes(() => p.db('web', 'query', { sql: wideRow(100) }));
  assert.equal(r.status, 507, r.text.slice(0, 300));
  assert.equal(r.json.error.code, 'quota_exceeded');
  assert.match(r.json.error.message, /DB_MEMORY_MAX_BYTES/);
  assert.equal(r.json.error.details.memoryMaxBytes, LIMIT);
  // Before: 1.6 GB and more, stopped only by the result limit once every column had been copied out.
  assert.ok(peak < LIMIT + 256 * 1024 * 1024, `an executor reached ${Math.round(peak / 2 ** 20)} MiB`);
  const w = await p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (1)' });
  assert.equal(w.status, 200, w.text);
  const q = await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' });
  assert.deepEqual(q.json.results[0].rows, [[1]]);
});

test('the same through the libSQL protocol: SQLITE_FULL naming the limit', async () => {
  // (A write's RETURNING row is a record, held to the length limit: 507 for DB_MAX_VALUE_BYTES before any of this.)
  const h = await p.db('web', 'v2/pipeline', { requests: [{ type: 'execute', stmt: { sql: wideRow(100) } }, { type: 'close' }] });
  assert.equal(h.status, 200, h.text.slice(0, 300));
  assert.equal(h.json.results[0].error.code, 'SQLITE_FULL');
  assert.match(h.json.results[0].error.message, /DB_MEMORY_MAX_BYTES/);
});

test('a read of ordinary rows that fills the result limit is not stopped', async () => {
  await p.db('web', 'execute', { sql: "INSERT INTO t(v) SELECT printf('%0500d', value) FROM (WITH RECURSIVE c(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM c WHERE value < 30000) SELECT value FROM c)" });
  const r = await p.db('web', 'query', { sql: 'SELECT id, v FROM t', rows: 'objects' });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  assert.equal(r.json.results[0].rows.length, 30001);
});

test('a row of a dozen 8 MB texts is 413 result_too_large, not a 500 (its JSON text was past V8\'s longest string)', async () => {
  // Memory to spare: what is judged here is the reply, not the process.
  const roomy = await startProduct({ DB_MEMORY_MAX_BYTES: String(4 * 1024 ** 3), DB_QUERY_TIMEOUT_MS: '30000' });
  try {
    await roomy.db('web', 'execute', { sql: 'CREATE TABLE t(v)' });
    // 8 MB of U+0000 is 48 MB of JSON (each one \u0000): twelve of them, 576 M characters.
    const sql = `WITH x(b) AS (SELECT CAST(zeroblob(8000000) AS TEXT)) SELECT ${Array(12).fill('b').join(', ')} FROM x`;
    for (const rows of ['arrays', 'objects']) {
      const r = await roomy.db('web', 'query', { sql, rows });
      assert.equal(r.status, 413, `${rows}: ${r.text.slice(0, 300)}`);
      assert.equal(r.json.error.code, 'result_too_large');
    }
    const h = await roomy.db('web', 'v2/pipeline', { requests: [{ type: 'execute', stmt: { sql } }, { type: 'close' }] });
    assert.equal(h.json.results[0].error.code, 'SQLITE_TOOBIG', h.text.slice(0, 300));
  } finally {
    await roomy.close();
  }
});

test('distinct large statements are not kept prepared: an executor does not grow by each one (it kept 128 per database)', async () => {
  const lean = await startProduct({ DB_QUERY_TIMEOUT_MS: '30000' });
  const total = () => executorPids().reduce((n, pid) => n + (residentBytes(pid) ?? 0), 0);
  try {
    await lean.db('web', 'execute', { sql: 'CREATE TABLE t(v)' });
    const before = total();
    // Each 1 MB `IN` list holds ~50 MB once prepared: 24 of them were ~1.2 GB kept in the executors for good.
    for (let i = 0; i < 24; i++) {
      const r = await lean.db('web', 'query', { sql: `SELECT ${i} IN (${'1,'.repeat(500_000)}1)` });
      assert.equal(r.status, 200, r.text.slice(0, 300));
    }
    const grown = total() - before;
    assert.ok(grown < 512 * 1024 * 1024, `the executors grew by ${Math.round(grown / 2 ** 20)} MiB`);
  } finally {
    await lean.close();
  }
});
