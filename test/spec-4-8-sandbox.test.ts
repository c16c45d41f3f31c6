// SPEC 4.8 from the outside, through the proxy over real HTTP: what the sandbox refuses on every operation that runs
// user SQL, what its read-only PRAGMA allow-list lets through, TEMP objects, timeouts that hold no one else, limits,
// and concurrent writes to one database (serialized, never SQLITE_BUSY).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';
import { upload } from './helpers/imports.ts';

let p: Product;
before(async () => {
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: '1500', DB_MAX_SIZE_BYTES: String(256 * 1024), DB_MAX_VALUE_BYTES: String(4096), DB_MAX_DATABASES_PER_REPO: '6', DB_QUEUE_TIMEOUT_MS: '10000' });
  const setup = await p.db('web', 'execute', { statements: [{ sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' }, { sql: 'CREATE INDEX t_v ON t(v)' }, { sql: 'CREATE TABLE c(p REFERENCES t(id))' }] });
  assert.equal(setup.status, 200, setup.text);
});
after(() => p.close());

const version = async (database = 'main') => (await p.db('web', 'status', { database })).json.version;

describe('refused with not_allowed, on query as on execute', () => {
  const refused = ["ATTACH DATABASE ':memory:' AS x", "ATTACH 'other.sqlite' AS x", 'DETACH DATABASE x', "VACUUM INTO 'copy.sqlite'", "SELECT load_extension('x')",
    'PRAGMA journal_mode = DELETE', 'PRAGMA writable_schema = ON', 'PRAGMA user_version = 7', 'PRAGMA cache_size = 1', 'PRAGMA database_list',
    "SELECT * FROM pragma_database_list", 'PRAGMA temp_store = MEMORY', 'PRAGMA query_only = 0', 'PRAGMA trusted_schema = 1'];
  for (const op of ['query', 'execute']) {
    test(`${op}: ATTACH, DETACH, VACUUM INTO, load_extension and PRAGMAs off the allow-list`, async () => {
      const v = await version();
      for (const sql of refused) assertSpecError(await p.db('web', op, { sql }), 400, 'not_allowed', `${op} ${sql}`);
      assert.equal(await version(), v);
    });
  }
});

describe('the read-only PRAGMA allow-list', () => {
  const allowed = ['PRAGMA table_info(t)', 'PRAGMA table_xinfo(t)', 'PRAGMA index_list(t)', 'PRAGMA index_info(t_v)', 'PRAGMA foreign_key_list(c)',
    'PRAGMA foreign_key_check', 'PRAGMA user_version', "SELECT name FROM pragma_table_info('t')", "SELECT * FROM pragma_index_info('t_v')"];
  for (const op of ['query', 'execute']) {
    test(`${op}: table_info, table_xinfo, index_list, index_info, foreign_key_list, foreign_key_check, user_version read`, async () => {
      for (const sql of allowed) {
        const r = await p.db('web', op, { sql });
        assert.equal(r.status, 200, `${op} ${sql}: ${r.text}`);
      }
      const info = await p.db('web', op, { sql: 'PRAGMA index_info(t_v)' });
      assert.deepEqual(info.json.results[0].rows.map((row: unknown[]) => row.at(-1)), ['v']);
    });
  }
});

describe('nothing a request creates outlives it', () => {
  test('TEMP objects, by keyword or by temp.-qualified name, are refused and leave nothing', async () => {
    for (const sql of ['CREATE TEMP TABLE x(a)', 'CREATE TEMPORARY TABLE x(a)', 'CREATE TEMP VIEW v AS SELECT 1', 'CREATE TEMP TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END',
      'CREATE TABLE temp.x(a)', 'CREATE TABLE TEMP.x(a)', 'CREATE VIEW temp.v AS SELECT 1', 'CREATE TABLE temp.x AS SELECT 1 AS a']) {
      assertSpecError(await p.db('web', 'execute', { sql }), 400, 'not_allowed', sql);
      const q = await p.db('web', 'query', { sql });
      assert.equal(q.status, 400, `query ${sql}: ${q.text}`);
    }
    const leftover = await p.db('web', 'query', { sql: "SELECT count(*) FROM temp.sqlite_schema" });
    assert.deepEqual(leftover.json.results[0].rows, [[0]]);
  });

  test('virtual tables only from the allow-list; an allowed one works', async () => {
    assertSpecError(await p.db('web', 'execute', { database: 'vt', sql: 'CREATE VIRTUAL TABLE s USING dbstat' }), 400, 'not_allowed');
    const fts = await p.db('web', 'execute', { database: 'vt', statements: [{ sql: 'CREATE VIRTUAL TABLE docs USING fts5(body)' }, { sql: "INSERT INTO docs VALUES ('hello world')" }] });
    assert.equal(fts.status, 200, fts.text);
  });
});

describe('the statement time limit', () => {
  const runaway = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';
  test('a statement past DB_QUERY_TIMEOUT_MS gets 422 query_timeout, while requests to other databases go on', async () => {
    assert.equal((await p.db('web', 'execute', { database: 'other', sql: 'CREATE TABLE o(x)' })).status, 200);
    const started = Date.now();
    let stopped = false;
    const slow = p.db('web', 'query', { sql: runaway }).finally(() => (stopped = true));
    for (let i = 0; i < 5; i++) {
      const r = await p.db('web', 'execute', { database: 'other', sql: 'INSERT INTO o VALUES (?)', params: [i] });
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(stopped, false, 'five writes to another database were answered while the runaway still ran: they did not wait for it');
    assertSpecError(await slow, 422, 'query_timeout');
    assert.ok(Date.now() - started < 5000, 'stopped near its limit');
    const w = await p.db('web', 'execute', { sql: `INSERT INTO t(v) ${runaway}` });
    assertSpecError(w, 422, 'query_timeout');
    assert.equal((await p.db('web', 'query', { sql: 'SELECT 1' })).status, 200, 'the database answers again');
  });
});

describe('limits are refused cleanly', () => {
  test('a value past the length limit is 507 quota_exceeded whether bound or computed; nothing stays', async () => {
    const v = await version();
    assertSpecError(await p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (?)', params: ['x'.repeat(5000)] }), 507, 'quota_exceeded', 'bound');
    assertSpecError(await p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (zeroblob(5000))' }), 507, 'quota_exceeded', 'computed');
    assert.equal(await version(), v);
  });

  test('the write that would cross DB_MAX_SIZE_BYTES gets 507 and leaves nothing; reads go on', async () => {
    assert.equal((await p.db('web', 'execute', { database: 'full', sql: 'CREATE TABLE f(b)' })).status, 200);
    let r;
    for (let i = 0; i < 200; i++) {
      r = await p.db('web', 'execute', { database: 'full', statements: Array.from({ length: 10 }, () => ({ sql: 'INSERT INTO f VALUES (randomblob(3000))' })) });
      if (r.status !== 200) break;
    }
    assertSpecError(r!, 507, 'quota_exceeded');
    const rows = (await p.db('web', 'query', { database: 'full', sql: 'SELECT count(*) FROM f' })).json.results[0].rows[0][0];
    assert.equal(rows % 10, 0, 'the refused batch left none of its rows');
    assert.equal((await p.db('web', 'status', { database: 'full' })).status, 200);
  });
  test('the database past DB_MAX_DATABASES_PER_REPO is 507 by every way of making one (execute, migrate, a dry run, an import) and is not made', async () => {
    for (let i = 0; i < 6; i++) assert.equal((await p.db('few', 'execute', { database: `d${i}`, sql: 'CREATE TABLE t(x)' })).status, 200);
    const one = [{ id: '0001', sql: 'CREATE TABLE t(x);' }];
    assertSpecError(await p.db('few', 'execute', { database: 'extra', sql: 'CREATE TABLE t(x)' }), 507, 'quota_exceeded', 'execute');
    assertSpecError(await p.db('few', 'migrate', { database: 'extra', migrations: one }), 507, 'quota_exceeded', 'migrate');
    assertSpecError(await p.db('few', 'migrate', { database: 'extra', migrations: one, dryRun: true }), 507, 'quota_exceeded', 'a dry run fails where the real run does');
    assertSpecError(await upload(p, 'few', 'database=extra&mode=create', 'CREATE TABLE t(x);\n', 'application/sql'), 507, 'quota_exceeded', 'import');
    const s = await p.db('few', 'status', { database: 'extra' });
    assert.equal(s.json.exists, false);
    assert.equal(s.json.databases.length, 6);
    assert.equal((await p.db('few', 'query', { database: 'd0', sql: 'SELECT count(*) FROM t' })).status, 200, 'reads go on');
  });
});

describe('concurrent writes to one database', () => {
  test('are serialized: all answer 200, one version each, never SQLITE_BUSY', async () => {
    assert.equal((await p.db('web', 'execute', { database: 'busy', sql: 'CREATE TABLE n(x)' })).status, 200);
    const replies = await Promise.all(Array.from({ length: 30 }, (_, i) => p.db('web', 'execute', { database: 'busy', statements: [{ sql: 'INSERT INTO n VALUES (?)', params: [i] }, { sql: 'UPDATE n SET x = x' }] })));
    for (const r of replies) assert.equal(r.status, 200, r.text);
    assert.deepEqual(replies.map((r) => r.json.version).sort((a, b) => a - b), Array.from({ length: 30 }, (_, i) => i + 2));
    assert.deepEqual((await p.db('web', 'query', { database: 'busy', sql: 'SELECT count(*) FROM n' })).json.results[0].rows, [[30]]);
  });
});
