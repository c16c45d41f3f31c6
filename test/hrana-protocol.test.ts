// SPEC 4.10, the protocol itself: every request type, result fields, batons and the shapes it refuses, written from
// libSQL's HTTP_V2_SPEC and HRANA_3_SPEC and sent as raw JSON through the proxy (bounds on streams and transactions:
// hrana-stream-bounds.test.ts; SPEC 4.4 and 4.5 on the protocol: hrana-protocol-limits.test.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
const pipeline = (body: unknown, path = '/web/_db/v2/pipeline', repo = 'web') =>
  p.call(path, { body, headers: { authorization: `Bearer ${p.secret('acme', repo)}` } });
const version = async (database = 'main') => (await p.db('web', 'status', { database })).json.version as number;

before(async () => {
  p = await startProduct();
});
after(() => p.close());

describe('the protocol (libSQL HTTP_V2_SPEC, HRANA_3_SPEC)', () => {
  test('version probes; stored SQL; autocommit; describe; close; conditions of every kind', async () => {
    assert.equal((await p.call('/web/_db/v2')).status, 200);
    assert.equal((await p.call('/web/_db/main/v3')).status, 200);
    // SPEC 2: a database name that breaks its rule is 400 invalid_name on the probe too, as on the pipeline.
    for (const bad of ['Main', 'a.b', '_x', 'x%20y']) {
      const probe = await p.call(`/web/_db/${bad}/v2`);
      assert.equal(probe.status, 400, bad);
      assert.equal(probe.json.error.code, 'invalid_name', bad);
    }
    const res = await pipeline({
      baton: null,
      requests: [
        { type: 'store_sql', sql_id: 1, sql: 'SELECT ? + 1 AS n' },
        { type: 'execute', stmt: { sql_id: 1, args: [{ type: 'integer', value: '41' }] } },
        { type: 'get_autocommit' },
        { type: 'describe', sql: 'SELECT 1' },
        {
          type: 'batch', batch: {
            steps: [
              { stmt: { sql: 'SELECT nosuchfunction()' } },
              { condition: { type: 'error', step: 0 }, stmt: { sql: 'SELECT 1' } },
              { condition: { type: 'and', conds: [{ type: 'ok', step: 1 }, { type: 'is_autocommit' }] }, stmt: { sql: 'SELECT 2' } },
              { condition: { type: 'or', conds: [{ type: 'ok', step: 0 }, { type: 'not', cond: { type: 'ok', step: 2 } }] }, stmt: { sql: 'SELECT 3' } },
            ],
          },
        },
        { type: 'close_sql', sql_id: 1 },
        { type: 'execute', stmt: { sql_id: 1 } },
        { type: 'nosuch' },
        { type: 'close' },
      ],
    });
    assert.equal(res.status, 200, res.text);
    const r = res.json.results;
    assert.equal(res.json.baton, null, 'closed: no baton');
    assert.deepEqual(r[1].response.result.rows, [[{ type: 'integer', value: '42' }]]);
    assert.equal(r[2].response.is_autocommit, true);
    assert.equal(r[3].response.result.is_readonly, true);
    const batch = r[4].response.result;
    assert.equal(batch.step_errors[0].code, 'SQLITE_ERROR');
    assert.deepEqual(batch.step_results.map((x: unknown) => x !== null), [false, true, true, false]);
    assert.equal(r[6].type, 'error', 'a closed sql_id is gone');
    assert.equal(r[7].type, 'error');
    assert.match(r[7].error.message, /unknown request type/);
    assert.equal(r[8].type, 'ok');
  });

  test('describe: parameters as SQLite names them, columns with declared types, read-only and EXPLAIN, nothing run', async () => {
    await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE described(id INTEGER PRIMARY KEY, title TEXT)' } }, { type: 'close' }] });
    const v0 = await version();
    const res = await pipeline({
      baton: null,
      requests: [
        { type: 'describe', sql: 'SELECT id, title, 1 + 1 AS two FROM described WHERE id = :id OR title = ?3 OR title = ?' },
        { type: 'describe', sql: "INSERT INTO described(title) VALUES ($t) RETURNING id" },
        { type: 'describe', sql: 'EXPLAIN SELECT 1' },
        { type: 'describe', sql: 'SELEC nonsense' },
        { type: 'describe', sql: "ATTACH 'x.db' AS x" },
        { type: 'close' },
      ],
    });
    assert.equal(res.status, 200, res.text);
    const [select, insert, explain, bad, attach] = res.json.results;
    assert.deepEqual(select.response.result, {
      params: [{ name: ':id' }, { name: null }, { name: '?3' }, { name: null }],
      cols: [{ name: 'id', decltype: 'INTEGER' }, { name: 'title', decltype: 'TEXT' }, { name: 'two', decltype: null }],
      is_explain: false, is_readonly: true,
    });
    assert.deepEqual(insert.response.result, { params: [{ name: '$t' }], cols: [{ name: 'id', decltype: 'INTEGER' }], is_explain: false, is_readonly: false });
    assert.equal(explain.response.result.is_explain, true);
    assert.deepEqual([bad.type, bad.error.code], ['error', 'SQLITE_ERROR']);
    assert.deepEqual([attach.type, attach.error.code], ['error', 'SQLITE_AUTH']);
    assert.equal(await version(), v0, 'describe runs nothing');
    assert.equal((await p.db('web', 'query', { sql: 'SELECT count(*) AS n FROM described' })).json.results[0].rows[0][0], 0);
    // On the stream's own connection (HRANA_3_SPEC): inside a transaction, what it made so far is there.
    const stmt = (sql: string) => ({ type: 'execute', stmt: { sql } });
    const tx = await pipeline({ baton: null, requests: [stmt('BEGIN'), stmt('CREATE TABLE fresh(n INTEGER)'), { type: 'describe', sql: 'SELECT n FROM fresh' }, stmt('ROLLBACK'), { type: 'close' }] });
    assert.deepEqual(tx.json.results[2].response?.result.cols, [{ name: 'n', decltype: 'INTEGER' }], tx.text);
  });

  test('a text of two statements is refused on every path, an interactive transaction too: none is silently dropped', async () => {
    await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE twice(x)' } }, { type: 'close' }] });
    const two = { sql: 'INSERT INTO twice VALUES (1); INSERT INTO twice VALUES (2)' };
    const begun = await pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: two }, { type: 'execute', stmt: { sql: 'INSERT INTO twice VALUES (3)' } }] });
    assert.deepEqual(begun.json.results.map((r: { type: string }) => r.type), ['ok', 'error', 'ok'], begun.text);
    assert.match(begun.json.results[1].error.message, /more than one statement/);
    const committed = await pipeline({ baton: begun.json.baton, requests: [{ type: 'execute', stmt: { sql: 'COMMIT' } }, { type: 'close' }] });
    assert.equal(committed.json.results[0].type, 'ok', committed.text);
    const alone = await pipeline({ baton: null, requests: [{ type: 'execute', stmt: two }, { type: 'describe', sql: two.sql }, { type: 'close' }] });
    assert.deepEqual(alone.json.results.slice(0, 2).map((r: { type: string }) => r.type), ['error', 'error']);
    assert.deepEqual((await p.db('web', 'query', { sql: 'SELECT x FROM twice' })).json.results[0].rows, [[3]], 'neither half of the refused text ran');
  });

  test('StmtResult fields: cols with decltype, typed values, affected_row_count, last_insert_rowid as text, want_rows', async () => {
    const stmt = (sql: string, extra: Record<string, unknown> = {}) => ({ type: 'execute', stmt: { sql, ...extra } });
    const res = await pipeline({
      baton: null,
      requests: [
        stmt('CREATE TABLE shapes(id INTEGER PRIMARY KEY, r REAL, t TEXT, b BLOB)'),
        stmt("INSERT INTO shapes(r, t, b) VALUES (2.0, 'a\"b', x'00ff'), (1e999, NULL, NULL)"),
        stmt('INSERT INTO shapes(r) VALUES (0.5) RETURNING id, r * 2 AS twice'),
        stmt('SELECT id, r, t, b FROM shapes ORDER BY id'),
        stmt('SELECT id FROM shapes', { want_rows: false }),
        { type: 'close' },
      ],
    });
    assert.equal(res.status, 200, res.text);
    const [create, insert, returning, select, noRows] = res.json.results.map((x: { response: { result: Record<string, unknown> } }) => x.response.result);
    for (const r of [create, insert, returning, select, noRows]) {
      assert.deepEqual(Object.keys(r).sort(), ['affected_row_count', 'cols', 'last_insert_rowid', 'query_duration_ms', 'rows', 'rows_read', 'rows_written']);
      assert.equal(typeof r.query_duration_ms, 'number');
    }
    assert.deepEqual([insert.affected_row_count, insert.last_insert_rowid], [2, '2']);
    assert.deepEqual(returning.cols, [{ name: 'id', decltype: 'INTEGER' }, { name: 'twice', decltype: null }]);
    assert.deepEqual(returning.rows, [[{ type: 'integer', value: '3' }, { type: 'float', value: 1 }]]);
    assert.deepEqual([returning.affected_row_count, returning.last_insert_rowid], [1, '3']);
    assert.deepEqual(select.rows, [
      [{ type: 'integer', value: '1' }, { type: 'float', value: 2 }, { type: 'text', value: 'a"b' }, { type: 'blob', base64: 'AP8=' }],
      [{ type: 'integer', value: '2' }, { type: 'null' }, { type: 'null' }, { type: 'null' }], // JSON has no Infinity
      [{ type: 'integer', value: '3' }, { type: 'float', value: 0.5 }, { type: 'null' }, { type: 'null' }],
    ]);
    assert.deepEqual([select.affected_row_count, select.last_insert_rowid], [0, null]);
    assert.deepEqual(noRows.rows, [], 'want_rows: false');
    assert.deepEqual(noRows.cols, [{ name: 'id', decltype: 'INTEGER' }]);
  });

  test('blob arguments: base64 with or without = padding, as libsql-server takes them; anything else is refused in Hrana\'s words', async () => {
    const run = (base64: string) => pipeline({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT hex(?) AS h', args: [{ type: 'blob', base64 }] } }] });
    for (const [base64, hex] of [['AAE', '0001'], ['AAE=', '0001'], ['AP8', '00FF'], ['AA', '00'], ['AA==', '00'], ['', '']]) {
      const r = await run(base64!);
      assert.equal(r.json.results[0].type, 'ok', `${base64}: ${r.text}`);
      assert.deepEqual(r.json.results[0].response.result.rows, [[{ type: 'text', value: hex }]], base64);
    }
    for (const bad of ['A', 'AA=A', 'AA*=', 'AAAAA']) {
      const r = await run(bad);
      assert.equal(r.json.results[0].type, 'error', bad);
      assert.match(r.json.results[0].error.message, /"base64" is not base64/, bad);
    }
  });

  test('a statement with both "sql" and "sql_id" is refused (Hrana: exactly one); every sandbox refusal is SQLITE_AUTH, load_extension too', async () => {
    const r = await pipeline({ baton: null, requests: [
      { type: 'store_sql', sql_id: 1, sql: 'SELECT 2' },
      { type: 'execute', stmt: { sql: 'SELECT 1', sql_id: 1 } },
      { type: 'execute', stmt: { sql: "SELECT load_extension('x')" } },
      { type: 'execute', stmt: { sql: 'CREATE TEMP TABLE t(x)' } },
    ] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.results[1].type, 'error');
    assert.match(r.json.results[1].error.message, /"sql" or "sql_id", not both/);
    assert.deepEqual(r.json.results.slice(2).map((x: { error?: { code: string } }) => x.error?.code), ['SQLITE_AUTH', 'SQLITE_AUTH']);
  });

  test('v3/cursor (HRANA_3_SPEC): a batch\'s result as newline-separated JSON, a baton line then step entries; the stream goes on', async () => {
    const cursor = async (body: unknown) => {
      const r = await p.call('/web/_db/cursordb/v3/cursor', { body, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
      assert.equal(r.status, 200, r.text);
      assert.ok(r.text.endsWith('\n'));
      return r.text.trimEnd().split('\n').map((line) => JSON.parse(line));
    };
    const lines = await cursor({ baton: null, batch: { steps: [
      { stmt: { sql: 'CREATE TABLE c(x)' } },
      { stmt: { sql: 'INSERT INTO c VALUES (1), (2)' } },
      { stmt: { sql: 'SELECT x FROM c ORDER BY x' } },
      { stmt: { sql: 'SELECT nope FROM c' } },
      { condition: { type: 'ok', step: 3 }, stmt: { sql: 'SELECT 1' } },
    ] } });
    const [head, ...entries] = lines;
    assert.equal(head.base_url, null);
    assert.match(head.baton, /^[A-Za-z0-9_-]{20,}$/);
    assert.deepEqual(entries.map((e: { type: string; step?: number }) => `${e.type}${e.step ?? ''}`), ['step_begin0', 'step_end', 'step_begin1', 'step_end', 'step_begin2', 'row', 'row', 'step_end', 'step_error3']);
    assert.deepEqual(entries[5].row, [{ type: 'integer', value: '1' }]);
    assert.deepEqual(entries[3], { type: 'step_end', affected_row_count: 2, last_insert_rowid: '2' });
    assert.match(entries[8].error.message, /no such column/);
    const next = await cursor({ baton: head.baton, batch: { steps: [{ stmt: { sql: 'SELECT count(*) FROM c' } }] } });
    assert.deepEqual(next[2].row, [{ type: 'integer', value: '2' }], 'the baton continues the stream');
    const steps = await cursor({ baton: null, batch: { steps: 'x' } });
    assert.equal(steps.at(-1).type, 'error');
    assert.match(steps.at(-1).error.message, /^batch\.steps must be an array/, 'named as the cursor\'s body names it');
    const bad = await p.call('/web/_db/v3/cursor', { body: { baton: null, requests: [] }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /a cursor request is/);
    // Hrana clients show an HTTP error's top-level `message` (else only "Server returned HTTP status 400"), as on pipelines.
    assert.equal(bad.json.message, bad.json.error.message, bad.text);
    const stale = await p.call('/web/_db/cursordb/v3/cursor', { body: { baton: head.baton, batch: { steps: [] } }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.deepEqual([stale.status, stale.json.code], [400, 'INVALID_REQUEST'], stale.text);
    assert.match(stale.json.message, /unknown baton/);
  });

  test('batons: one use each, bound to their database and repo; malformed bodies get SPEC 3 errors', async () => {
    const first = await pipeline({ baton: null, requests: [{ type: 'store_sql', sql_id: 5, sql: 'SELECT 5 AS v' }] });
    const baton = first.json.baton as string;
    assert.match(baton, /^[A-Za-z0-9_-]{20,}$/);
    const second = await pipeline({ baton, requests: [{ type: 'execute', stmt: { sql_id: 5 } }] });
    assert.deepEqual(second.json.results[0].response.result.rows, [[{ type: 'integer', value: '5' }]], 'the stream kept its stored SQL');
    assert.notEqual(second.json.baton, baton);
    const replay = await pipeline({ baton, requests: [] });
    assert.equal(replay.status, 400);
    assert.match(replay.json.error.message, /unknown baton/);
    assert.equal((await pipeline({ baton: second.json.baton, requests: [] }, '/web/_db/other/v2/pipeline')).status, 400, 'another database');
    assert.equal((await pipeline({ baton: second.json.baton, requests: [] }, '/site/_db/v2/pipeline', 'site')).status, 400, 'another repo');
    const bad = await pipeline({ requests: 'x' });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.code, 'invalid_request');
    assert.ok(bad.headers['x-request-id']);
    assert.equal((await p.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [] } })).status, 401, 'the repo secret is required');
    assert.equal((await pipeline({ baton: null, requests: [] }, '/web/_db/Bad/v2/pipeline')).json.error.code, 'invalid_name');
  });
});

describe('shapes the protocol does not allow are refused, not read loosely', () => {
  test('a condition naming a step not before its own, a fractional or reused sql_id, a baton that is not a string', async () => {
    const steps = (condition: unknown) => [{ stmt: { sql: 'SELECT 1' } }, { condition, stmt: { sql: 'SELECT 2' } }];
    for (const condition of [{ type: 'ok', step: 1 }, { type: 'ok', step: 5 }, { type: 'error', step: -1 }, { type: 'not', cond: { type: 'ok', step: 1e20 } }, { type: 'and', conds: 'x' }]) {
      const r = await pipeline({ baton: null, requests: [{ type: 'batch', batch: { steps: steps(condition) } }] });
      assert.equal(r.json.results[0].type, 'error', JSON.stringify(condition));
      assert.match(r.json.results[0].error.message, /not an earlier step|must be an array/, JSON.stringify(condition));
    }
    const stored = await pipeline({ baton: null, requests: [{ type: 'store_sql', sql_id: 1.5, sql: 'SELECT 1' }, { type: 'store_sql', sql_id: 2, sql: 'SELECT 1' }, { type: 'store_sql', sql_id: 2, sql: 'SELECT 2' }, { type: 'execute', stmt: { sql_id: 2 } }] });
    assert.deepEqual(stored.json.results.map((x: { type: string }) => x.type), ['error', 'ok', 'error', 'ok']);
    assert.deepEqual(stored.json.results[3].response.result.rows, [[{ type: 'integer', value: '1' }]], 'the first text stays');
    const baton = await pipeline({ baton: 123, requests: [] });
    assert.equal(baton.status, 400);
    assert.match(baton.json.error.message, /"baton": string \| null/);
  });
});

test('a named argument given twice with different values is refused, not bound by a guess', async () => {
  const args = (b: unknown) => ({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT :a AS a', named_args: [{ name: ':a', value: { type: 'integer', value: '1' } }, { name: 'a', value: b }] } }] });
  const twice = await pipeline(args({ type: 'integer', value: '2' }));
  assert.equal(twice.json.results[0].type, 'error', twice.text);
  assert.match(twice.json.results[0].error.message, /names "a" twice with different values/);
  const same = await pipeline(args({ type: 'integer', value: '1' }));
  assert.equal(same.json.results[0].type, 'ok', same.text);
});
