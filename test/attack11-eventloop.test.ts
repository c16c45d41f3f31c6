// Attack round 11: work one tenant's request puts on the main event loop (every org's requests wait behind it), far
// beyond what reading its body costs. A quiet org's status is timed back to back while the crafted request runs.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { spawnProduct, tempDir, testEnv, type HttpResult, type SpawnedProduct } from './helpers/product.ts';
import { rawDb, whileQuietWaits as quietWaits } from './helpers/quiet-org.ts';

// A process of its own: the test's own work (bodies of 30 MB) must not be what holds the loop measured.
let p: SpawnedProduct;
const dataDirs: string[] = [];
/** A product of its own, whose heap no earlier test grew: a full collection of it would be timed too. */
async function fresh(): Promise<void> {
  p?.killAll();
  dataDirs.push(tempDir());
  p = await spawnProduct(testEnv(dataDirs.at(-1)!, { DB_QUERY_TIMEOUT_MS: '10000' }));
}
before(fresh);
after(() => {
  p.killAll();
  for (const dir of dataDirs) rmSync(dir, { recursive: true, force: true });
});

const db = (op: string, body: Buffer): Promise<HttpResult> => rawDb(p.url, 'acme', 'web', op, body);
const whileQuietWaits = <T>(attack: () => Promise<T>) => quietWaits(p.url, attack);

const LIMIT_MS = 1000;

test('JSON objects whose names all differ: 1.9 million named params (29 MB) held every org 3.1 s: parsed, checked and sent on', async () => {
  const names = Array.from({ length: 1_900_000 }, (_, i) => `"a${i}":null`).join(',');
  const { result, worstMs, tookMs } = await whileQuietWaits(() => db('query', Buffer.from(`{"sql":"SELECT :a0","params":{${names}}}`)));
  assert.equal(result.status, 413, result.text.slice(0, 300));
  assert.equal(result.json.error.code, 'payload_too_large');
  assert.equal(result.json.error.message, 'the JSON body\'s objects use more than 1,000 different names and hold more than 100,000 objects, arrays and members in all; send it in parts');
  assert.ok(worstMs < LIMIT_MS, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms)`);
});

test('JSON objects whose names all differ: a libSQL pipeline of 950,000 arguments with names of their own (30 MB) held every org 2.2 s in JSON.parse', async () => {
  const args = Array.from({ length: 950_000 }, (_, i) => `{"type":"null","x${i}":0}`).join(',');
  const body = Buffer.from(`{"requests":[{"type":"execute","stmt":{"sql":"SELECT 1","args":[${args}]}}]}`);
  const { result, worstMs, tookMs } = await whileQuietWaits(() => db('v2/pipeline', body));
  assert.equal(result.status, 413, result.text.slice(0, 300));
  assert.match(result.json.error.message, /^the JSON body's objects use more than 1,000 different names/);
  assert.ok(worstMs < LIMIT_MS, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms)`);
});

test('what clients send still passes: 32,766 named params (SQLite\'s most), and 1.9 million arguments of a few names', async () => {
  const names = Array.from({ length: 32_766 }, (_, i) => `"a${i}":${i}`).join(',');
  const named = await db('query', Buffer.from(`{"sql":"SELECT :a0 + :a32765 AS s","params":{${names}}}`));
  assert.equal(named.status, 404, named.text.slice(0, 300)); // parsed and checked: no such database (a read makes none)
  const args = `{"type":"null"},`.repeat(1_900_000);
  const pipeline = await db('v2/pipeline', Buffer.from(`{"requests":[{"type":"execute","stmt":{"sql":"SELECT 1","args":[${args}{"type":"integer","value":"1"}]}}]}`));
  assert.equal(pipeline.status, 200, pipeline.text.slice(0, 300));
});

/** A 200-byte statement whose rows come to about 15 MB: 400,000 of one integer. */
const ROWS_SQL = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 400000) SELECT x FROM c';

/** How long a quiet org waits while the same rows go out as one libSQL `execute`, passed on as the executor wrote them. */
async function rowsFloorMs(): Promise<number> {
  const body = Buffer.from(JSON.stringify({ requests: [{ type: 'execute', stmt: { sql: ROWS_SQL } }, { type: 'close' }] }));
  const { result, worstMs } = await whileQuietWaits(() => db('v2/pipeline', body));
  assert.equal(result.status, 200, result.text.slice(0, 300));
  return worstMs;
}

test('a libSQL v3/cursor batch of 15 MB of rows: parsed twice and written again row by row, held every org 0.4-0.7 s more than the same rows of one execute, for a 200-byte request', async () => {
  await fresh();
  const floor = await rowsFloorMs();
  const body = Buffer.from(JSON.stringify({ baton: null, batch: { steps: [{ stmt: { sql: ROWS_SQL } }, { condition: { type: 'ok', step: 0 }, stmt: { sql: "SELECT -0.0 AS z, 'a\"],[b' AS t" } }] } }));
  const { result, worstMs, tookMs } = await whileQuietWaits(() => db('v3/cursor', body));
  assert.equal(result.status, 200, result.text.slice(0, 300));
  const lines = result.text.split('\n');
  assert.equal(lines.length, 1 + (2 + 400_000) + 3 + 1, 'baton, each step\'s begin, rows and end, a last newline');
  assert.deepEqual(JSON.parse(lines[1]!), { type: 'step_begin', step: 0, cols: [{ name: 'x', decltype: null }] });
  assert.equal(lines[400_001], '{"type":"row","row":[{"type":"integer","value":"400000"}]}');
  assert.deepEqual(JSON.parse(lines[400_002]!), { type: 'step_end', affected_row_count: 0, last_insert_rowid: null });
  assert.equal(lines[400_004], '{"type":"row","row":[{"type":"float","value":-0.0},{"type":"text","value":"a\\"],[b"}]}', 'a -0.0 and a text holding JSON\'s punctuation pass as they were');
  assert.ok(worstMs < floor + 300, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms; ${Math.round(floor)} ms for the rows of one execute)`);
});

test('the same v3/cursor batch inside an interactive transaction: each statement\'s result was parsed, then written again', async () => {
  await fresh();
  const floor = await rowsFloorMs();
  const begin = await db('v2/pipeline', Buffer.from(JSON.stringify({ requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }] })));
  assert.equal(begin.status, 200, begin.text.slice(0, 300));
  assert.equal(begin.json.results[0].type, 'ok', begin.text.slice(0, 300));
  const body = Buffer.from(JSON.stringify({ baton: begin.json.baton, batch: { steps: [{ stmt: { sql: ROWS_SQL } }, { stmt: { sql: "SELECT -0.0 AS z, 'a\"],[b' AS t", want_rows: false } }] } }));
  const { result, worstMs, tookMs } = await whileQuietWaits(() => db('v3/cursor', body));
  assert.equal(result.status, 200, result.text.slice(0, 300));
  const lines = result.text.split('\n');
  assert.equal(lines.length, 1 + (2 + 400_000) + 2 + 1, 'the second step\'s rows were not wanted');
  assert.equal(lines[400_001], '{"type":"row","row":[{"type":"integer","value":"400000"}]}');
  assert.deepEqual(JSON.parse(lines[400_003]!), { type: 'step_begin', step: 1, cols: [{ name: 'z', decltype: null }, { name: 't', decltype: null }] });
  const rollback = await db('v2/pipeline', Buffer.from(JSON.stringify({ baton: JSON.parse(lines[0]!).baton, requests: [{ type: 'execute', stmt: { sql: 'ROLLBACK' } }, { type: 'close' }] })));
  assert.equal(rollback.json.results[0].type, 'ok', rollback.text.slice(0, 300));
  assert.ok(worstMs < floor + 250, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms; ${Math.round(floor)} ms for the rows of one execute)`);
});

test('a libSQL execute of 1.9 million arguments: each was named for an error it might raise, before it was read (0.6-0.7 s more than parsing them)', async () => {
  await fresh();
  const args = '{"type":"null"},'.repeat(1_900_000);
  // The same objects in a request of an unknown type: what receiving and parsing them costs this loop, now.
  const floor = await whileQuietWaits(() => db('v2/pipeline', Buffer.from(`{"requests":[{"type":"unknown","stmt":{"sql":"SELECT 1","args":[${args}{"type":"null"}]}}]}`)));
  const body = Buffer.from(`{"requests":[{"type":"execute","stmt":{"sql":"SELECT 1","args":[${args}{"type":"bogus"}]}}]}`);
  const { result, worstMs, tookMs } = await whileQuietWaits(() => db('v2/pipeline', body));
  assert.equal(result.status, 200, result.text.slice(0, 300));
  assert.match(result.json.results[0].error.message, /^requests\[0\]\.stmt\.args\[1900000\] is not a Hrana value/);
  assert.ok(worstMs < floor.worstMs + 100, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms; ${Math.round(floor.worstMs)} ms for the same objects unread)`);
});

test('a libSQL sequence of BEGIN then 1.3 million PRAGMA foreign_keys statements: each answered without I/O, the loop never given back (1.6 s more than the text in a comment; 4.3 s more without the BEGIN)', async () => {
  await fresh();
  const text = `BEGIN; ${'PRAGMA foreign_keys=ON;'.repeat(1_300_000)} ROLLBACK;`;
  // The same text in a comment: what receiving, parsing and splitting 30 MB costs this loop, now.
  const floor = await whileQuietWaits(() => db('v2/pipeline', Buffer.from(JSON.stringify({ requests: [{ type: 'sequence', sql: `SELECT 1 /* ${text} */` }, { type: 'close' }] }))));
  const body = Buffer.from(JSON.stringify({ requests: [{ type: 'sequence', sql: text }, { type: 'get_autocommit' }, { type: 'close' }] }));
  const { result, worstMs, tookMs } = await whileQuietWaits(() => db('v2/pipeline', body));
  assert.equal(result.status, 200, result.text.slice(0, 300));
  assert.equal(result.json.results[0].type, 'ok', result.text.slice(0, 300));
  assert.equal(result.json.results[1].response.is_autocommit, true, 'the sequence rolled its transaction back');
  assert.ok(worstMs < floor.worstMs + 500, `another org waited ${Math.round(worstMs)} ms (the request took ${Math.round(tookMs)} ms; ${Math.round(floor.worstMs)} ms for the text in a comment)`);
  // Without a BEGIN: every statement was copied, comments removed, to look for one (4 s for 3 million), before the
  // statements were refused as too many for one write.
  const many = Buffer.from(JSON.stringify({ requests: [{ type: 'sequence', sql: 'PRAGMA x;'.repeat(3_000_000) }, { type: 'close' }] }));
  const refused = await whileQuietWaits(() => db('v2/pipeline', many));
  assert.equal(refused.result.status, 200, refused.result.text.slice(0, 300));
  assert.equal(refused.result.json.results[0].error.code, 'SQLITE_TOOBIG', refused.result.text.slice(0, 300));
  assert.ok(refused.worstMs < floor.worstMs + 600, `another org waited ${Math.round(refused.worstMs)} ms (the request took ${Math.round(refused.tookMs)} ms; ${Math.round(floor.worstMs)} ms for a text in a comment)`);
});
