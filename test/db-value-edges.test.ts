// SPEC 4.2's edges, through the proxy over real HTTP: a REAL -0.0 on every result path, Tcl-style parameter names,
// the slot a positional error names, and DB_MAX_VALUE_BYTES for values computed in SQL.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
const pipeline = (rawBody: string, database = 'edges') => p.call(`/web/_db/${database}/v2/pipeline`, { rawBody, headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' } });
/** A float -0 argument: JSON.stringify would send it as 0. */
const NEG_FLOAT = { type: 'float', value: 'NEG_ZERO' };
const withNegZero = (body: unknown) => JSON.stringify(body).replaceAll('"NEG_ZERO"', '-0.0');

before(async () => {
  p = await startProduct();
});
after(() => p.close());

describe('a REAL -0.0 reads back as -0.0, not 0 (SPEC 4.2: nothing is lost on a round trip)', () => {
  before(async () => {
    assert.equal((await p.db('web', 'execute', { database: 'edges', sql: 'CREATE TABLE z(a, r REAL)' })).status, 200);
  });

  test('/_db/query, in arrays and objects, computed or stored', async () => {
    const ins = await p.db('web', 'execute', { database: 'edges', sql: 'INSERT INTO z(a) VALUES (-0.0), (0.0), (-1.5)' });
    assert.equal(ins.status, 200, ins.text);
    const arrays = await p.db('web', 'query', { database: 'edges', sql: 'SELECT -0.0, 0.0 * -1, typeof(-0.0), 0.0, 1.0' });
    assert.equal(arrays.status, 200, arrays.text);
    assert.match(arrays.text, /"rows":\[\[-0\.0,-0\.0,"real",0,1\]\]/, 'a REAL -0.0 is written -0.0 (JSON.stringify writes 0)');
    assert.ok(Object.is(arrays.json.results[0].rows[0][0], -0), 'it parses as -0');
    const stored = await p.db('web', 'query', { database: 'edges', sql: 'SELECT a FROM z ORDER BY rowid' });
    assert.match(stored.text, /"rows":\[\[-0\.0\],\[0\],\[-1\.5\]\]/);
    const objects = await p.db('web', 'query', { database: 'edges', sql: 'SELECT a AS v, typeof(a) AS t FROM z WHERE rowid = 1', rows: 'objects' });
    assert.match(objects.text, /"rows":\[\{"v":-0\.0,"t":"real"\}\]/);
    // An integer past ±(2^53−1) makes a statement read again with BigInts on: -0.0 is kept on that path too.
    const big = await p.db('web', 'query', { database: 'edges', sql: 'SELECT -0.0, 9007199254740993' });
    assert.match(big.text, /"rows":\[\[-0\.0,\{"\$bigint":"9007199254740993"\}\]\]/);
  });

  test('/_db/execute RETURNING', async () => {
    const r = await p.db('web', 'execute', { database: 'edges', sql: 'INSERT INTO z(a) VALUES (-0.0) RETURNING a, typeof(a)' });
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /"rows":\[\[-0\.0,"real"\]\]/);
  });

  test('a JSON -0 or -0.0 parameter is an integral number: it binds as INTEGER 0 (SPEC 4.2), as docs/database.md says', async () => {
    const r = await p.db('web', 'query', undefined, { rawBody: '{"database":"edges","sql":"SELECT ?1, typeof(?1), ?2, typeof(?2)","params":[-0,-0.0]}' });
    assert.equal(r.status, 200, r.text);
    assert.match(r.text, /"rows":\[\[0,"integer",0,"integer"\]\]/);
  });

  test('the libSQL protocol: a float -0 argument binds as REAL -0.0, and -0.0 comes back as {"type":"float","value":-0.0} on every path', async () => {
    const execute = await pipeline(withNegZero({ baton: null, requests: [
      { type: 'execute', stmt: { sql: 'SELECT -0.0, ?1, typeof(?1)', args: [NEG_FLOAT] } },
      { type: 'execute', stmt: { sql: 'INSERT INTO z(a) VALUES (?) RETURNING a', args: [NEG_FLOAT] } },
      { type: 'batch', batch: { steps: [{ stmt: { sql: 'SELECT -0.0' } }, { stmt: { sql: 'SELECT a FROM z WHERE rowid = 1' } }] } },
      { type: 'execute', stmt: { sql: 'BEGIN' } },
      { type: 'execute', stmt: { sql: 'INSERT INTO z(a) VALUES (?) RETURNING a', args: [NEG_FLOAT] } },
      { type: 'execute', stmt: { sql: 'COMMIT' } },
      { type: 'close' },
    ] }));
    assert.equal(execute.status, 200, execute.text);
    const results = execute.json.results;
    assert.ok(results.every((r: { type: string }) => r.type === 'ok'), execute.text);
    const negZero = '{"type":"float","value":-0.0}';
    assert.ok(execute.text.includes(`"rows":[[${negZero},${negZero},{"type":"text","value":"real"}]]`), execute.text);
    assert.ok(Object.is(results[0].response.result.rows[0][1].value, -0));
    assert.ok(execute.text.includes(`"rows":[[${negZero}]]`), 'RETURNING');
    assert.ok(Object.is(results[1].response.result.rows[0][0].value, -0), 'a float -0 argument binds as REAL -0.0');
    const steps = results[2].response.result.step_results;
    assert.ok(Object.is(steps[0].rows[0][0].value, -0) && Object.is(steps[1].rows[0][0].value, -0), 'a batch\'s results');
    assert.ok(Object.is(results[4].response.result.rows[0][0].value, -0), 'a statement of an interactive transaction');
    // What the protocol stored reads back as -0.0 over the JSON API too.
    const read = await p.db('web', 'query', { database: 'edges', sql: 'SELECT a FROM z ORDER BY rowid DESC LIMIT 1' });
    assert.match(read.text, /"rows":\[\[-0\.0\]\]/);
    const cursor = await p.call('/web/_db/edges/v3/cursor', { body: { baton: null, batch: { steps: [{ stmt: { sql: 'SELECT -0.0' } }] } }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.ok(cursor.text.includes(`{"type":"row","row":[${negZero}]}`), cursor.text);
  });

  test('a dump (export format sql) writes -0.0', async () => {
    const r = await p.db('web', 'export', { database: 'edges', format: 'sql' });
    assert.equal(r.status, 200);
    assert.match(r.text, /INSERT INTO "z"\([^)]*\) VALUES\(\d+,-0\.0,NULL\);/);
  });
});

describe('Tcl-style parameter names ($a::b, $a(x)) bind by their bare name, as SQLite reads them', () => {
  before(async () => {
    assert.equal((await p.db('web', 'execute', { database: 'tcl', sql: 'CREATE TABLE z(a)' })).status, 200);
  });

  test('/_db/query and /_db/execute: the bare name is what follows the prefix, `::` and `(…)` included', async () => {
    const r = await p.db('web', 'query', { database: 'tcl', sql: "SELECT $a::b AS a, :c(x) AS c, @d(x'y) AS d, #e AS e, $f$g AS f, $h::i(1) AS h", params: { 'a::b': 1, 'c(x)': 'two', "d(x'y)": 3, e: null, f$g: 5.5, 'h::i(1)': 6 } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results[0].rows, [[1, 'two', 3, null, 5.5, 6]]);
    const w = await p.db('web', 'execute', { database: 'tcl', sql: 'INSERT INTO z(a) VALUES ($v::w || $v(1)) RETURNING a', params: { 'v::w': 'x', 'v(1)': 'y' } });
    assert.equal(w.status, 200, w.text);
    assert.deepEqual(w.json.results[0].rows, [['xy']]);
    // A `$` inside a word is part of the word (SQLite's identifiers take it), not a parameter.
    const word = await p.db('web', 'query', { database: 'tcl', sql: 'SELECT ? AS x$y', params: [7] });
    assert.equal(word.status, 200, word.text);
    assert.deepEqual(word.json.results[0].rows, [[7]]);
  });

  test('a missing, extra or prefixed name is one 400 invalid_request naming the statement and the parameter as written', async () => {
    const cases: [string, unknown, RegExp, string][] = [
      ['SELECT $a::b', { a: 1 }, /statements\[0\]: the named parameter \$a::b is missing from "params" \(keyed "a::b"\)/, 'a::b'],
      ['SELECT $a(x)', {}, /statements\[0\]: the named parameter \$a\(x\) is missing from "params" \(keyed "a\(x\)"\)/, 'a(x)'],
      ['SELECT $a(x)', { 'a(x)': 1, a: 2 }, /statements\[0\]: "params" has "a", which the statement does not use/, 'a'],
      ['SELECT $a::b', { '$a::b': 1 }, /statements\[0\]: "params" has "\$a::b": named parameters are keyed by their bare name, "a::b"/, '$a::b'],
      ['SELECT $a::b', undefined, /statements\[0\] takes 1 parameter and none were sent: \$a::b is missing/, 'a::b'],
    ];
    for (const [sql, params, message, parameter] of cases) {
      const r = await p.db('web', 'query', { database: 'tcl', sql, ...(params === undefined ? {} : { params }) });
      assert.equal(r.status, 400, `${sql} ${JSON.stringify(params)}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, message);
      assert.deepEqual(r.json.error.details, { statement: 0, parameter });
    }
    for (const key of [':a', 'a b', 'a(x', '(x)', '::']) {
      const r = await p.db('web', 'query', { database: 'tcl', sql: 'SELECT $a::b', params: { [key]: 1 } });
      assert.equal(r.status, 400, key);
      assert.match(r.json.error.message, /named parameters are keyed by their bare name/, key);
    }
  });

  test('the libSQL protocol: named_args with the prefix ($a::b) or without bind; describe names them as SQLite does', async () => {
    const int = (value: string) => ({ type: 'integer', value });
    const r = await pipeline(JSON.stringify({ baton: null, requests: [
      { type: 'execute', stmt: { sql: 'SELECT $a::b, $c(x), :d(1)', named_args: [{ name: '$a::b', value: int('1') }, { name: '$c(x)', value: int('2') }, { name: 'd(1)', value: int('3') }] } },
      { type: 'describe', sql: 'SELECT $a::b, $c(x)' },
      { type: 'execute', stmt: { sql: 'SELECT $a::b', named_args: [{ name: '$a', value: int('1') }] } },
    ] }), 'tcl');
    assert.equal(r.status, 200, r.text);
    const [execute, describe, missing] = r.json.results;
    assert.deepEqual(execute.response.result.rows, [[int('1'), int('2'), int('3')]], r.text);
    assert.deepEqual(describe.response.result.params, [{ name: '$a::b' }, { name: '$c(x)' }]);
    assert.equal(missing.type, 'error');
    assert.match(missing.error.message, /the named parameter \$a::b is missing/);
  });
});

describe('a positional error names the slot the statement uses (SPEC 4.2: naming the statement and the parameter)', () => {
  test('?NNN with gaps, ? after ?NNN, ?NNN after ?, none sent, one extra; over the JSON API and the libSQL protocol', async () => {
    const cases: [string, unknown[] | undefined, RegExp, number][] = [
      ['SELECT ?5', [1], /takes 5 parameters \(params\[0\] binds \?1, params\[k\] binds \?k\+1\): \?5 is missing/, 5],
      ['SELECT ?, ?5', [1], /: \?5 is missing/, 5],
      ['SELECT ?3, ?1', [1], /: \?3 is missing/, 3],
      ['SELECT ?2, ?', [1], /takes 3 parameters .*: \?2 is missing/, 2], // the `?` after ?2 is ?3
      ['SELECT ?5, ?', [1, 2, 3, 4, 5], /takes 6 parameters .*: \?6 is missing/, 6],
      ['SELECT ?5', undefined, /takes 5 parameters and none were sent: \?5 is missing/, 5],
      ['SELECT ?, ?5', undefined, /takes 5 parameters and none were sent: \?1 is missing/, 1],
      ['SELECT ?5', [1, 2, 3, 4, 5, 6], /takes 5 parameters; params\[5\] is extra/, 6],
    ];
    for (const [sql, params, message, parameter] of cases) {
      const r = await p.db('web', 'execute', { database: 'slots', statements: [{ sql: 'SELECT 1' }, { sql, ...(params ? { params } : {}) }] });
      assert.equal(r.status, 400, `${sql}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, /^statements\[1\]/);
      assert.match(r.json.error.message, message, sql);
      assert.deepEqual(r.json.error.details, { statement: 1, parameter }, sql);
    }
    const h = await pipeline(JSON.stringify({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT ?5', args: [{ type: 'integer', value: '1' }] } }] }), 'slots');
    assert.equal(h.json.results[0].type, 'error', h.text);
    assert.match(h.json.results[0].error.message, /\?5 is missing/);
  });
});

describe('a rowid past ±(2^53−1) comes back as $bigint, with RETURNING too', () => {
  test('/_db/execute and the libSQL protocol: lastInsertRowid and the returned row (it was 400 "Value is too large to be represented as a JavaScript number")', async () => {
    assert.equal((await p.db('web', 'execute', { database: 'bigrow', sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' })).status, 200);
    const r = await p.db('web', 'execute', { database: 'bigrow', sql: 'INSERT INTO t(id, v) VALUES (9007199254740993, 1) RETURNING id' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results[0].lastInsertRowid, { $bigint: '9007199254740993' });
    assert.deepEqual(r.json.results[0].rows, [[{ $bigint: '9007199254740993' }]]);
    const small = await p.db('web', 'execute', { database: 'bigrow', sql: 'INSERT INTO t(id, v) VALUES (7, 1) RETURNING id' });
    assert.equal(small.json.results[0].lastInsertRowid, 7, 'a rowid within the safe range stays a number');
    const h = await pipeline(JSON.stringify({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'INSERT INTO t(id, v) VALUES (-9007199254740995, 2) RETURNING v' } }] }), 'bigrow');
    assert.equal(h.json.results[0].type, 'ok', h.text);
    assert.equal(h.json.results[0].response.result.last_insert_rowid, '-9007199254740995');
  });
});

describe('DB_MAX_VALUE_BYTES holds for values computed in SQL, not only for parameters', () => {
  const LIMIT = 65536;
  let q: Product;
  before(async () => {
    q = await startProduct({ DB_MAX_VALUE_BYTES: String(LIMIT) });
    assert.equal((await q.db('web', 'execute', { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, a, n)' })).status, 200);
  });
  after(() => q.close());

  const refusedAsTooLong = (r: { status: number; json: { error: { code: string; message: string } } }, what: string) => {
    assert.equal(r.status, 507, what);
    assert.equal(r.json.error.code, 'quota_exceeded', what);
    assert.match(r.json.error.message, /over the length limit \(DB_MAX_VALUE_BYTES bounds each string or blob, and each row's values together\)/, what);
  };

  test('a value computed past the limit is refused, by execute, a migration and the libSQL protocol; nothing of it stays', async () => {
    // It was stored: the length limit had 18 KB of room above DB_MAX_VALUE_BYTES for a row's header, whatever the table.
    for (const sql of [`INSERT INTO t(a) VALUES (zeroblob(${LIMIT} + 10000))`, `INSERT INTO t(a) VALUES (zeroblob(${LIMIT} + 100))`, `INSERT INTO t(a) VALUES (printf('%.*c', ${LIMIT} + 100, 'x'))`]) {
      refusedAsTooLong(await q.db('web', 'execute', { sql }), sql);
    }
    refusedAsTooLong(await q.db('web', 'migrate', { migrations: [{ id: '1', sql: `INSERT INTO t(a) VALUES (zeroblob(${LIMIT} + 1000));` }] }), 'migrate');
    const hrana = await q.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: `INSERT INTO t(a) VALUES (zeroblob(${LIMIT} + 1000))` } }] }, headers: { authorization: `Bearer ${q.secret('acme', 'web')}` } });
    assert.equal(hrana.json.results[0].type, 'error', hrana.text);
    assert.equal(hrana.json.results[0].error.code, 'SQLITE_TOOBIG');
    assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT count(*) FROM t' })).json.results[0].rows, [[0]]);
  });

  test('a value of exactly the limit is still stored, computed or bound, and its row can still be updated', async () => {
    const made = await q.db('web', 'execute', { sql: `INSERT INTO t(a, n) VALUES (zeroblob(${LIMIT}), 1)` });
    assert.equal(made.status, 200, made.text);
    const bound = await q.db('web', 'execute', { sql: 'INSERT INTO t(a, n) VALUES (?, ?)', params: [{ $blob: Buffer.alloc(LIMIT, 1).toString('base64') }, 2] });
    assert.equal(bound.status, 200, bound.text);
    const updated = await q.db('web', 'execute', { sql: 'UPDATE t SET n = n + 1e9' });
    assert.equal(updated.status, 200, updated.text);
    assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT length(a), n FROM t ORDER BY id' })).json.results[0].rows, [[LIMIT, 1e9 + 1], [LIMIT, 1e9 + 2]]);
  });

  test('a row\'s values together are held to the limit and a few bytes of room, not 18 KB of it', async () => {
    refusedAsTooLong(await q.db('web', 'execute', { sql: `INSERT INTO t(a, n) VALUES (zeroblob(${LIMIT} - 100), zeroblob(200))` }), 'two values');
    const fits = await q.db('web', 'execute', { sql: `INSERT INTO t(a, n) VALUES (zeroblob(${LIMIT} - 200), zeroblob(100))` });
    assert.equal(fits.status, 200, fits.text);
  });
});
