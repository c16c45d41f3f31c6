// SPEC 4.2 from the outside, through the proxy over real HTTP: each value's SQLite type, the round trip of every
// encoding, the request shapes, DB_MAX_STATEMENTS and parameters matching their statement on both operations.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';

let p: Product;
before(async () => {
  p = await startProduct({ DB_MAX_STATEMENTS: '5' });
  const setup = await p.db('web', 'execute', { sql: 'CREATE TABLE v(id INTEGER PRIMARY KEY, x)' });
  assert.equal(setup.status, 200, setup.text);
});
after(() => p.close());

/** `SELECT typeof(?), ?` of one JSON parameter, sent as raw JSON text so its spelling reaches the server as written. */
async function bound(json: string): Promise<[string, unknown]> {
  const r = await p.db('web', 'query', undefined, { rawBody: `{"sql": "SELECT typeof(?1), ?1", "params": [${json}]}` });
  assert.equal(r.status, 200, `${json}: ${r.text}`);
  return r.json.results[0].rows[0];
}

describe('JSON values map to SQLite types', () => {
  test('null → NULL, string → TEXT, an integral number → INTEGER, any other number → REAL', async () => {
    const cases: [string, string][] = [
      ['null', 'null'], ['"text"', 'text'], ['""', 'text'], ['0', 'integer'], ['-7', 'integer'], ['9007199254740991', 'integer'],
      ['-9007199254740991', 'integer'], ['1.5', 'real'], ['-0.25', 'real'], ['1e-7', 'real'], ['1.7976931348623157e308', 'real'],
      ['1.0', 'integer'], ['1e2', 'integer'], ['{"$bigint": "9223372036854775807"}', 'integer'], ['{"$blob": "AAEC"}', 'blob'], ['{"$blob": ""}', 'blob'],
    ];
    for (const [json, type] of cases) assert.equal((await bound(json))[0], type, json);
  });

  test('every encoding round-trips: read back, sent again as a parameter, stored and read back unchanged', async () => {
    const values: unknown[] = [null, 'héllo ✓ 𝄞', 'a\u0000b', '', 0, -1, 42, 9007199254740991, -9007199254740991, 0.1 + 0.2, -1.5e-300, 5e-324,
      { $bigint: '9007199254740992' }, { $bigint: '-9007199254740992' }, { $bigint: '9223372036854775807' }, { $bigint: '-9223372036854775808' },
      { $blob: '' }, { $blob: 'AA==' }, { $blob: Buffer.from([0, 255, 1, 254, 10, 13]).toString('base64') }];
    for (const value of values) {
      const first = await p.db('web', 'execute', { sql: 'INSERT INTO v(x) VALUES (?) RETURNING id, x', params: [value] });
      assert.equal(first.status, 200, `${JSON.stringify(value)}: ${first.text}`);
      const [id, read] = first.json.results[0].rows[0];
      assert.deepEqual(read, value, `returned as sent: ${JSON.stringify(value)}`);
      const again = await p.db('web', 'query', { sql: 'SELECT x IS ?1, typeof(x) = typeof(?1) FROM v WHERE id = ?2', params: [read, id] });
      assert.deepEqual(again.json.results[0].rows[0], [1, 1], `same value and type again: ${JSON.stringify(value)}`);
    }
  });

  test('integers past ±(2^53−1) read back as $bigint, inside it as numbers, on query and execute', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT 9007199254740991, 9007199254740992, -9007199254740992, 9223372036854775807, -9223372036854775807 - 1' });
    assert.deepEqual(r.json.results[0].rows[0], [9007199254740991, { $bigint: '9007199254740992' }, { $bigint: '-9007199254740992' }, { $bigint: '9223372036854775807' }, { $bigint: '-9223372036854775808' }]);
    const w = await p.db('web', 'execute', { sql: 'SELECT 9007199254740992 AS big, x\'00ff\' AS b' });
    assert.deepEqual(w.json.results[0].rows[0], [{ $bigint: '9007199254740992' }, { $blob: 'AP8=' }]);
  });

  test('a $bigint outside the 64-bit range or not a decimal, and a $blob that is not base64, are 400 invalid_request', async () => {
    for (const value of [{ $bigint: '9223372036854775808' }, { $bigint: '12abc' }, { $bigint: 12 }, { $blob: '***' }, { $blob: 'AAE' }, { other: 1 }, [1, 2]]) {
      const r = await p.db('web', 'query', { sql: 'SELECT ?', params: [value] });
      assertSpecError(r, 400, 'invalid_request', JSON.stringify(value));
    }
  });
});

describe('statements and requests', () => {
  test('positional ? and ?NNN; named :name, @name and $name keyed by the bare name', async () => {
    const pos = await p.db('web', 'query', { sql: 'SELECT ?, ?3, ?2', params: ['a', 'b', 'c'] });
    assert.deepEqual(pos.json.results[0].rows[0], ['a', 'c', 'b']);
    const named = await p.db('web', 'query', { sql: 'SELECT :one, @two, $three', params: { one: 1, two: 'two', three: null } });
    assert.equal(named.status, 200, named.text);
    assert.deepEqual(named.json.results[0].rows[0], [1, 'two', null]);
  });

  test('one statement at the top level, or a batch in statements; both at once, or neither, is 400 invalid_request', async () => {
    const one = await p.db('web', 'query', { sql: 'SELECT ?', params: [1] });
    assert.deepEqual(one.json.results.map((x: { rows: unknown[] }) => x.rows), [[[1]]]);
    const batch = await p.db('web', 'query', { statements: [{ sql: 'SELECT 1' }, { sql: 'SELECT ?', params: [2] }, { sql: 'SELECT :a', params: { a: 3 } }] });
    assert.deepEqual(batch.json.results.map((x: { rows: unknown[] }) => x.rows), [[[1]], [[2]], [[3]]]);
    assertSpecError(await p.db('web', 'query', { sql: 'SELECT 1', statements: [{ sql: 'SELECT 2' }] }), 400, 'invalid_request', 'both');
    assertSpecError(await p.db('web', 'query', {}), 400, 'invalid_request', 'neither');
    assertSpecError(await p.db('web', 'query', { params: [1] }), 400, 'invalid_request', 'params alone');
  });

  test('at most DB_MAX_STATEMENTS statements: exactly the limit runs, one more is 413 payload_too_large on query and execute', async () => {
    const five = Array.from({ length: 5 }, (_, i) => ({ sql: 'SELECT ?', params: [i] }));
    assert.equal((await p.db('web', 'query', { statements: five })).json.results.length, 5);
    assert.equal((await p.db('web', 'execute', { statements: five })).json.results.length, 5);
    for (const op of ['query', 'execute']) assertSpecError(await p.db('web', op, { statements: [...five, { sql: 'SELECT 6' }] }), 413, 'payload_too_large', op);
  });
});

describe('parameters must match the statement', () => {
  const cases: [string, unknown][] = [
    ['SELECT ?', []], ['SELECT ?, ?', [1]], ['SELECT ?', [1, 2]], ['SELECT 1', [1]], ['SELECT ?', undefined],
    ['SELECT :a', {}], ['SELECT :a', { a: 1, b: 2 }], ['SELECT 1', { a: 1 }], ['SELECT @a, $b', { a: 1 }],
  ];
  for (const op of ['query', 'execute']) {
    test(`${op}: a missing or extra parameter is 400 invalid_request naming the statement and the parameter`, async () => {
      for (const [sql, params] of cases) {
        const r = await p.db('web', op, { statements: [{ sql: 'SELECT 0' }, { sql, ...(params === undefined ? {} : { params }) }] });
        const e = assertSpecError(r, 400, 'invalid_request', `${sql} ${JSON.stringify(params)}`);
        assert.equal(e.details?.statement, 1, sql);
        assert.ok(e.details?.parameter !== undefined, `names the parameter: ${sql} ${JSON.stringify(params)}`);
        assert.match(e.message, /statements\[1\]/);
      }
    });
  }

  test('nothing binds NULL silently: a refused write wrote nothing', async () => {
    const before = (await p.db('web', 'query', { sql: 'SELECT count(*) FROM v' })).json.results[0].rows[0][0];
    assertSpecError(await p.db('web', 'execute', { sql: 'INSERT INTO v(x) VALUES (?)' }), 400, 'invalid_request');
    assertSpecError(await p.db('web', 'execute', { sql: 'INSERT INTO v(x) VALUES (:x)', params: { y: 1 } }), 400, 'invalid_request');
    assert.equal((await p.db('web', 'query', { sql: 'SELECT count(*) FROM v' })).json.results[0].rows[0][0], before);
  });

  test('a statement without parameters takes no params, an empty array or an empty object', async () => {
    for (const params of [undefined, [], {}]) {
      const r = await p.db('web', 'query', { sql: 'SELECT 1', ...(params === undefined ? {} : { params }) });
      assert.equal(r.status, 200, `${JSON.stringify(params)}: ${r.text}`);
    }
  });
});
