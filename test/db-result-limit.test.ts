// SPEC 4.8: DB_MAX_RESULT_BYTES counts bytes of the reply. Exactly: a reply of the limit's size passes, one a byte
// over is refused (413 result_too_large, SPEC 3's shape, naming both sizes) and leaves nothing. It was counted high,
// refusing replies ~250 bytes under the limit (more in a batch).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

const LIMIT = 64 * 1024;
let p: Product;
before(async () => {
  p = await startProduct({ DB_MAX_RESULT_BYTES: String(LIMIT), DB_MAX_VALUE_BYTES: String(LIMIT) });
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' })).status, 200);
});
after(() => p.close());

const bytes = (text: string) => Buffer.byteLength(text, 'utf8');
const digits = (n: number) => String(n).length;

function refusedPrecisely(r: { status: number; text: string; json: any }, size: number, statement: number): void { // eslint-disable-line @typescript-eslint/no-explicit-any
  assert.equal(r.status, 413, r.text);
  assert.deepEqual(r.json, { error: {
    code: 'result_too_large',
    message: `the reply would be ${size} bytes, over DB_MAX_RESULT_BYTES (${LIMIT} bytes): select fewer rows or columns, or page with LIMIT`,
    details: { statement, maxResultBytes: LIMIT, replyBytes: size },
  } });
}

/** A reply of exactly `LIMIT + over` bytes for `sql(n)`, where n adds n bytes: measured once with a small n. */
async function atTheLimit(op: 'query' | 'execute', body: (n: number) => Record<string, unknown>, versionAfter: () => Promise<number>): Promise<void> {
  const probe = await p.db('web', op, body(10));
  assert.equal(probe.status, 200, probe.text);
  const around = bytes(probe.text) - 10 - digits(probe.json.version); // all but the padding and the version
  const exact = LIMIT - around - digits(await versionAfter());
  const at = await p.db('web', op, body(exact));
  assert.equal(at.status, 200, `a reply of exactly the limit passes: ${at.text.slice(0, 200)}`);
  assert.equal(bytes(at.text), LIMIT);
  const v = await versionAfter();
  const over = await p.db('web', op, body(exact + 1 - (digits(v) - digits(at.json.version))));
  refusedPrecisely(over, LIMIT + 1, (body(0).statements as unknown[] | undefined)?.length ? (body(0).statements as unknown[]).length - 1 : 0);
}

const version = async () => (await p.db('web', 'status', {})).json.version as number;

test('a read: rows as arrays, as objects, and a batch of statements', async () => {
  await atTheLimit('query', (n) => ({ sql: `SELECT printf('%.${n}c', 'x') AS v` }), version);
  await atTheLimit('query', (n) => ({ rows: 'objects', sql: `SELECT 1 AS a, printf('%.${n}c', 'x') AS v` }), version);
  await atTheLimit('query', (n) => ({ statements: [{ sql: 'SELECT 1 AS one' }, { sql: "SELECT 'two' AS two, 2" }, { sql: `SELECT printf('%.${n}c', 'x') AS v` }] }), version);
});

test('UTF-8 bytes, not characters: a reply of the limit in bytes with three-byte characters passes, one more byte does not', async () => {
  // '€' is 3 bytes: the padding is euros with 0–2 ASCII characters to land on the byte.
  const pad = (n: number) => `printf('%.${Math.floor(n / 3)}c', 'e') || printf('%.${n % 3}c', 'x')`;
  const euros = (n: number) => ({ sql: `SELECT replace(${pad(n)}, 'e', '€') AS v` });
  await atTheLimit('query', euros, version);
});

test('a write with RETURNING: at the limit it commits and its reply is exactly the limit; a byte over, nothing of it is applied', async () => {
  let id = 0;
  const insert = (n: number) => ({ sql: `INSERT INTO t(id, v) VALUES (${++id}, 1) RETURNING printf('%.${n}c', 'x') AS v` });
  const before = await version();
  // Each write that passes makes a version: the next reply's is one more.
  await atTheLimit('execute', insert, async () => (await version()) + 1);
  assert.equal(await version(), before + 2, 'the probe and the write at the limit; not the one over it');
  assert.deepEqual((await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' })).json.results[0].rows, [[2]]);
});

test('a reply far over the limit is stopped while its rows are made, naming the limit', async () => {
  const r = await p.db('web', 'query', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, printf(\'%100d\', x) FROM c' });
  assert.equal(r.status, 413, r.text);
  assert.deepEqual(r.json, { error: {
    code: 'result_too_large',
    message: `the reply is over DB_MAX_RESULT_BYTES (${LIMIT} bytes) at this statement's rows: select fewer rows or columns, or page with LIMIT`,
    details: { statement: 0, maxResultBytes: LIMIT },
  } });
});
