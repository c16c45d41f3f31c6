// SPEC 4.2 and 4.4 statement by statement, through the proxy over real HTTP: values and their encoding, parameters
// matching their statement, and each statement's rowsAffected and lastInsertRowid.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

describe('values (4.2)', () => {
  test('every value type round-trips losslessly through params and results', async () => {
    await p.db('web', 'execute', { database: 'values', sql: 'CREATE TABLE v(i, r, t, b, n, big)' });
    const big = { $bigint: '9223372036854775807' };
    const neg = { $bigint: '-9007199254740993' };
    const blob = { $blob: Buffer.from([0, 1, 2, 255]).toString('base64') };
    const w = await p.db('web', 'execute', { database: 'values', sql: 'INSERT INTO v VALUES (?, ?, ?, ?, ?, ?)', params: [42, 1.5, 'héllo', blob, null, big] });
    assert.equal(w.status, 200, w.text);
    await p.db('web', 'execute', { database: 'values', sql: 'INSERT INTO v(big) VALUES (?)', params: [neg] });
    const r = await p.db('web', 'query', { database: 'values', sql: 'SELECT i, typeof(i) ti, r, typeof(r) tr, t, b, n, big FROM v ORDER BY rowid' });
    assert.deepEqual(r.json.results[0].rows[0], [42, 'integer', 1.5, 'real', 'héllo', blob, null, big]);
    assert.deepEqual(r.json.results[0].rows[1].at(-1), neg);
  });

  test('an integral number binds as INTEGER, any other number as REAL', async () => {
    const r = await p.db('web', 'execute', { database: 'values', sql: 'SELECT typeof(?) a, typeof(?) b, typeof(?) c', params: [7, 7.25, -3] });
    assert.deepEqual(r.json.results[0].rows, [['integer', 'real', 'integer']]);
  });

  test('an integer past ±(2^53−1) as a JSON number is refused (JSON parsing rounded it), never stored wrong', async () => {
    for (const raw of ['9007199254740993', '-9007199254740993', '9223372036854775807']) {
      const r = await p.db('web', 'query', undefined, { rawBody: `{"database":"values","sql":"SELECT ?","params":[${raw}]}` });
      assert.equal(r.status, 400, `${raw}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, /params\[0\].*past ±\(2\^53−1\).*\$bigint/);
    }
    const real = await p.db('web', 'query', { database: 'values', sql: 'SELECT typeof(?)', params: [1e300] });
    assert.deepEqual(real.json.results[0].rows, [['real']], 'past the 64-bit range a number can only be a REAL');
  });

  test('a number past the range of a double (1e400 parses as Infinity) is refused: stored, it would read back as null', async () => {
    for (const raw of ['1e400', '-1e400']) {
      const r = await p.db('web', 'execute', undefined, { rawBody: `{"database":"values","sql":"SELECT ?","params":[${raw}]}` });
      assert.equal(r.status, 400, `${raw}: ${r.text}`);
      assert.match(r.json.error.message, /params\[0\].*Infinity/);
    }
    const hrana = await p.call('/web/_db/values/v2/pipeline', { rawBody: '{"baton":null,"requests":[{"type":"execute","stmt":{"sql":"SELECT ?","args":[{"type":"float","value":1e400}]}}]}', headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' } });
    assert.equal(hrana.json.results[0].type, 'error', hrana.text);
    assert.match(hrana.json.results[0].error.message, /Infinity/);
  });

  test('named parameters with :name, @name and $name are keyed by the bare name', async () => {
    const r = await p.db('web', 'execute', { database: 'values', sql: 'SELECT :a AS a, @b AS b, $c AS c', params: { a: 1, b: 'x', c: null } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results[0].rows, [[1, 'x', null]]);
  });

  test('positional ?NNN parameters', async () => {
    const r = await p.db('web', 'execute', { database: 'values', sql: 'SELECT ?2 AS a, ?1 AS b', params: ['one', 'two'] });
    assert.deepEqual(r.json.results[0].rows, [['two', 'one']]);
  });

  test('malformed $bigint and $blob are invalid_request', async () => {
    for (const bad of [{ $bigint: '12x' }, { $bigint: '99999999999999999999' }, { $blob: 'not base64!' }, { nested: 1 }, [1]]) {
      const r = await p.db('web', 'execute', { database: 'values', sql: 'SELECT ?', params: [bad] });
      assert.equal(r.status, 400, JSON.stringify(bad));
      assert.equal(r.json.error.code, 'invalid_request');
    }
  });
});

describe('rowsAffected, lastInsertRowid and creation (SPEC 4.4, issue 10)', () => {
  let q: Product;
  before(async () => {
    q = await startProduct();
  });
  after(() => q.close());

  test('rowsAffected counts only what the statement itself changed; lastInsertRowid only for inserts into user tables', async () => {
    const r = await q.db('web', 'execute', {
      database: 'counts',
      statements: [
        { sql: 'CREATE TABLE t(a)' },
        { sql: 'INSERT INTO t VALUES (1), (2), (3)' },
        { sql: 'CREATE INDEX ti ON t(a)' },
        { sql: 'CREATE TABLE log(n)' },
        { sql: 'CREATE TRIGGER tr AFTER UPDATE ON t BEGIN INSERT INTO log VALUES (new.a); END' },
        { sql: 'UPDATE t SET a = a + 10 WHERE a < 3' },
        { sql: 'SELECT count(*) FROM log' },
        { sql: 'INSERT INTO t VALUES (99) RETURNING a' },
        { sql: 'CREATE TABLE u(id INTEGER PRIMARY KEY)' },
        { sql: 'INSERT INTO u VALUES (5)' },
        { sql: 'INSERT OR IGNORE INTO u VALUES (5)' },
        { sql: 'DELETE FROM t WHERE a > 10' },
        { sql: 'CREATE TABLE p(id INTEGER PRIMARY KEY, n TEXT UNIQUE, c)' },
        { sql: "INSERT INTO p(id, n, c) VALUES (7, 'a', 1)" },
        { sql: "INSERT INTO p(n, c) VALUES ('a', 1) ON CONFLICT(n) DO UPDATE SET c = c + 1" },
        { sql: "INSERT INTO p(n, c) VALUES ('a', 1) ON CONFLICT(n) DO UPDATE SET c = c + 1 RETURNING id" },
        { sql: "INSERT INTO p(n, c) VALUES ('b', 1) ON CONFLICT(n) DO UPDATE SET c = c + 1" },
        { sql: "REPLACE INTO p(id, n, c) VALUES (7, 'a', 9)" },
      ],
    });
    assert.equal(r.status, 200, r.text);
    const got = r.json.results.map((x: { rowsAffected: number; lastInsertRowid: unknown }) => [x.rowsAffected, x.lastInsertRowid]);
    assert.deepEqual(got, [
      [0, null], // CREATE TABLE, first statement of a new database
      [3, 3],
      [0, null], // CREATE INDEX right after an insert of 3 rows
      [0, null],
      [0, null],
      [2, null], // the UPDATE's own rows, not the trigger's
      [0, null], // SELECT
      [1, 4],
      [0, null],
      [1, 5],
      [0, null], // ignored
      [3, null], // 11, 12 and 99
      [0, null],
      [1, 7],
      [1, null], // an upsert that took DO UPDATE inserted nothing (it reported the insert before it)
      [1, null], // the same with RETURNING
      [1, 8], // an upsert that inserted
      [1, 7], // REPLACE inserts (after deleting the old row)
    ]);
  });

  test('an INSERT into a WITHOUT ROWID table has no lastInsertRowid (it reported the change log\'s rowid, or an earlier insert\'s)', async () => {
    const database = 'norowid';
    assert.equal((await p.db('web', 'execute', { database, sql: 'CREATE TABLE w(k TEXT PRIMARY KEY, v) WITHOUT ROWID' })).status, 200);
    const alone = await p.db('web', 'execute', { database, sql: "INSERT INTO w VALUES ('a', 1)" });
    assert.deepEqual([alone.json.results[0].rowsAffected, alone.json.results[0].lastInsertRowid], [1, null]);
    const batch = await p.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE r(id INTEGER PRIMARY KEY)' }, { sql: 'INSERT INTO r VALUES (777)' }, { sql: "INSERT INTO w VALUES ('b', 2)" }] });
    assert.deepEqual(batch.json.results.map((x: { lastInsertRowid: unknown }) => x.lastInsertRowid), [null, 777, null]);
  });

  test('an execute that changes nothing still creates its database (version 0); a failed first write leaves none', async () => {
    const ok = await q.db('web', 'execute', { database: 'zero', sql: 'SELECT 1' });
    assert.equal(ok.status, 200);
    assert.equal(ok.json.version, 0);
    const s = await q.db('web', 'status', { database: 'zero' });
    assert.equal(s.json.exists, true);
    assert.equal(s.json.version, 0);
    const bad = await q.db('web', 'execute', { database: 'never', sql: 'INSERT INTO nosuch VALUES (1)' });
    assert.equal(bad.status, 400);
    assert.equal((await q.db('web', 'status', { database: 'never' })).json.exists, false);
    const dry = await q.db('web', 'migrate', { database: 'dry', dryRun: true, migrations: [{ id: '1', sql: 'CREATE TABLE t(x)' }] });
    assert.equal(dry.status, 200);
    assert.equal((await q.db('web', 'status', { database: 'dry' })).json.exists, false, 'a dry run creates nothing');
  });
});

describe('parameters must match the statement (SPEC 4.2, issue 10)', () => {
  let q: Product;
  before(async () => {
    q = await startProduct();
    await q.db('web', 'execute', { sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT NOT NULL, note TEXT)' });
  });
  after(() => q.close());

  test('missing or extra, positional or named: 400 invalid_request naming the statement and the parameter; nothing binds NULL', async () => {
    const cases: [string, unknown, RegExp, unknown][] = [
      ['INSERT INTO todos(title) VALUES (?)', [], /\?1 is missing/, 1],
      ['INSERT INTO todos(title, note) VALUES (?, ?)', ['a'], /\?2 is missing/, 2],
      ['INSERT INTO todos(title) VALUES (?)', ['a', 'b'], /params\[1\] is extra/, 2],
      ['INSERT INTO todos(title) VALUES (?)', undefined, /takes 1 parameter and none were sent/, 1],
      ['INSERT INTO todos(title, note) VALUES (:title, :note)', { title: 'a' }, /:note is missing/, 'note'],
      ['INSERT INTO todos(title) VALUES (:title)', { title: 'a', typo: 'b' }, /"typo", which the statement does not use/, 'typo'],
      ['INSERT INTO todos(title) VALUES ($title)', ['a'], /has named parameters \(:name\); send "params" as an object/, undefined],
      ['INSERT INTO todos(title, note) VALUES (:title, ?)', ['a', 'b'], /mixes positional \(\?\) and named/, undefined],
      ['INSERT INTO todos(title, note) VALUES (:title, ?)', { title: 'a' }, /mixes positional \(\?\) and named/, undefined],
      ['INSERT INTO todos(title) VALUES (:é)', undefined, /none were sent/, 'é'],
      ['INSERT INTO todos(title, note) VALUES (:t, @n)', { t: 'a' }, /@n is missing from "params" \(keyed "n"\)/, 'n'],
      // The slot the statement uses (?3), not the next one in counting order (it said "?2 is missing").
      ['INSERT INTO todos(title) VALUES (?3)', ['a'], /takes 3 parameters .*: \?3 is missing/, 3],
    ];
    for (const [sql, params, message, parameter] of cases) {
      const r = await q.db('web', 'execute', { statements: [{ sql: 'SELECT 1' }, { sql, ...(params === undefined ? {} : { params }) }] });
      assert.equal(r.status, 400, `${sql} ${JSON.stringify(params)}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, message);
      assert.match(r.json.error.message, /statements\[1\]/);
      assert.equal(r.json.error.details.statement, 1);
      assert.equal(r.json.error.details.parameter, parameter);
    }
    assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT count(*) FROM todos' })).json.results[0].rows, [[0]], 'nothing was written');
  });

  test('any name SQLite takes binds by its bare name: `__proto__`, non-ASCII, and :a with @a (two slots, one name)', async () => {
    const r = await q.db('web', 'execute', {
      statements: [
        { sql: 'INSERT INTO todos(title, note) VALUES (:__proto__, $__proto__) RETURNING title, note', params: { ['__proto__']: 'kept' } }, // a computed key: an own property
        { sql: 'INSERT INTO todos(title, note) VALUES (:é, :a || @a) RETURNING title, note', params: { é: 'accent', a: 'x' } },
      ],
    });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.results.map((x: { rows: unknown[] }) => x.rows[0]), [['kept', 'kept'], ['accent', 'xx']]);
    // JSON.parse makes "__proto__" an own key; sent as text, it must still arrive as the value, not as NULL.
    const raw = await q.db('web', 'query', undefined, { rawBody: '{"sql":"SELECT :__proto__ AS v","params":{"__proto__":{"$blob":"AQI="}},"rows":"objects"}' });
    assert.equal(raw.status, 200, raw.text);
    assert.deepEqual(raw.json.results[0].rows, [{ v: { $blob: 'AQI=' } }]);
    const col = await q.db('web', 'query', { sql: "SELECT x'0102' AS __proto__, 1 AS b", rows: 'objects' });
    assert.equal(col.text.includes('"rows":[{"__proto__":{"$blob":"AQI="},"b":1}]'), true, col.text);
  });

  test('what matches still works: strings, comments and quoted names that look like parameters are not parameters', async () => {
    const r = await q.db('web', 'execute', {
      statements: [
        { sql: "INSERT INTO todos(title, note) VALUES (?, '?:x @y $z') -- a ? in a comment", params: ['a'] },
        { sql: 'INSERT INTO todos(title, note) VALUES (:t, :t || ?3)', params: { t: 'b' } },
        { sql: "SELECT '?' AS \"q?\", ?1, ?1 + 1", params: [5] },
      ],
    });
    assert.equal(r.status, 400, 'a named and a numbered parameter together: send an array');
    const ok = await q.db('web', 'execute', {
      statements: [
        { sql: "INSERT INTO todos(title, note) VALUES (?, '?:x @y $z') /* ? */", params: ['a'] },
        { sql: 'INSERT INTO todos(title, note) VALUES (:t, :t)', params: { t: 'b' } },
        { sql: "SELECT '?' AS \"q?\", ?1, ?1 + 1", params: [5] },
      ],
    });
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json.results[2].rows, [['?', 5, 6]]);
  });
});

describe('a lowered DB_MAX_VALUE_BYTES bounds values and rows, not a request\'s whole change', () => {
  let q: Product;
  before(async () => {
    q = await startProduct({ DB_MAX_VALUE_BYTES: '65536' });
  });
  after(() => q.close());

  test('bulk inserts and deletes of small rows commit (they got 507: the change event was held to the value limit); mirrors get a snapshot instead', async () => {
    assert.equal((await q.db('web', 'execute', { sql: 'CREATE TABLE f(id INTEGER PRIMARY KEY, a)' })).status, 200);
    const bulk = await q.db('web', 'execute', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) INSERT INTO f(a) SELECT randomblob(1000) FROM c' });
    assert.equal(bulk.status, 200, bulk.text);
    const many = await q.db('web', 'execute', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000) INSERT INTO f(a) SELECT x FROM c' });
    assert.equal(many.status, 200, many.text);
    const gone = await q.db('web', 'execute', { sql: 'DELETE FROM f' });
    assert.equal(gone.status, 200, gone.text);
    assert.deepEqual((await q.db('web', 'query', { sql: 'SELECT count(*) FROM f' })).json.results[0].rows, [[0]]);
    const events = (await q.db('web', 'changes', { since: bulk.json.version - 1 })).json.events;
    assert.equal(events[0].changeset, null, 'past what one event may hold, followers take a snapshot');
    const small = await q.db('web', 'execute', { sql: 'INSERT INTO f(a) VALUES (1)' });
    assert.notEqual((await q.db('web', 'changes', { since: small.json.version - 1 })).json.events[0].changeset, null, 'a small change still travels as a changeset');
    const tooBig = await q.db('web', 'execute', { sql: 'INSERT INTO f(a) VALUES (randomblob(100000))' });
    assert.equal(tooBig.status, 507, 'one value past the limit is still refused');
    // A blob parameter of exactly the limit fits, one byte more does not (its base64 padding was counted as bytes).
    const blob = (n: number) => ({ $blob: Buffer.alloc(n, 7).toString('base64') });
    assert.equal((await q.db('web', 'execute', { sql: 'INSERT INTO f(a) VALUES (?)', params: [blob(65536)] })).status, 200);
    assert.equal((await q.db('web', 'execute', { sql: 'INSERT INTO f(a) VALUES (?)', params: [blob(65535)] })).status, 200);
    const over = await q.db('web', 'execute', { sql: 'INSERT INTO f(a) VALUES (?)', params: [blob(65537)] });
    assert.equal(over.status, 507);
    assert.match(over.json.error.message, /params\[0\] is 65537 bytes/);
  });
});
