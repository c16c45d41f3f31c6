// SPEC 4.8 through the proxy: the sandbox refuses what would reach outside the scope, and limits refuse cleanly.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct({ DB_MAX_RESULT_BYTES: String(64 * 1024), DB_MAX_VALUE_BYTES: String(16 * 1024), DB_MAX_SIZE_BYTES: String(512 * 1024), DB_MAX_DATABASES_PER_REPO: '3', DB_QUERY_TIMEOUT_MS: '1000' });
  await p.db('web', 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' }] });
});
after(() => p.close());

async function refused(op: string, sql: string, code: string, status = 400) {
  const r = await p.db('web', op, { sql });
  assert.equal(r.status, status, `${sql}: ${r.text}`);
  assert.equal(r.json.error.code, code, sql);
  return r;
}

describe('statements the sandbox refuses (not_allowed)', () => {
  const cases = [
    "ATTACH DATABASE '/tmp/other.db' AS other",
    'DETACH DATABASE main',
    "VACUUM INTO '/tmp/stolen.db'",
    'VACUUM',
    "SELECT load_extension('/tmp/evil.so')",
    'PRAGMA writable_schema = 1',
    'PRAGMA journal_mode = DELETE',
    'PRAGMA user_version = 5',
    'PRAGMA database_list',
    "SELECT * FROM pragma_database_list",
    'BEGIN', 'COMMIT', 'ROLLBACK', 'SAVEPOINT s', 'RELEASE s',
    "INSERT INTO _scopebase_meta (key, value) VALUES ('version', 999)",
    "UPDATE _scopebase_meta SET value = 0",
    'DELETE FROM _scopebase_changes',
    'DROP TABLE _scopebase_migrations',
    'CREATE TABLE _scopebase_mine (x)',
    'CREATE TABLE _SCOPEBASE_upper (x)',
    'CREATE INDEX i ON _scopebase_changes(event)',
    'CREATE TRIGGER tr AFTER INSERT ON _scopebase_changes BEGIN SELECT 1; END',
    'CREATE TRIGGER tr2 AFTER INSERT ON t BEGIN DELETE FROM _scopebase_changes; END',
    'ALTER TABLE _scopebase_meta ADD COLUMN y',
    'CREATE TEMP TABLE tt (x)',
  ];
  for (const sql of cases) {
    test(sql, async () => {
      await refused('execute', sql, 'not_allowed');
    });
  }

  test('the version was not touched by any refused statement', async () => {
    const s = await p.db('web', 'status', {});
    assert.equal(s.json.version, 1);
  });

  test('a trigger cannot smuggle a write into an internal table', async () => {
    // Even if created before a future rule change, firing it is refused at prepare time.
    const r = await p.db('web', 'execute', { sql: 'CREATE TRIGGER sneaky AFTER INSERT ON t BEGIN UPDATE _scopebase_meta SET value = 0; END' });
    assert.equal(r.json.error.code, 'not_allowed');
  });
});

describe('read-only pragma allow-list', () => {
  for (const sql of ['PRAGMA table_info(t)', 'PRAGMA table_xinfo(t)', 'PRAGMA index_list(t)', 'PRAGMA foreign_key_list(t)', 'PRAGMA foreign_key_check', 'PRAGMA user_version', "SELECT * FROM pragma_table_info('t')"]) {
    test(sql, async () => {
      const r = await p.db('web', 'query', { sql });
      assert.equal(r.status, 200, r.text);
    });
  }
  test('internal tables can be read', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT id FROM _scopebase_migrations' });
    assert.deepEqual(r.json.results[0].rows, [['1']]);
  });
});

describe('limits (quota_exceeded, result_too_large, payload_too_large)', () => {
  test('a 2 GB zeroblob is refused with quota_exceeded and the connection keeps working', async () => {
    await refused('execute', 'INSERT INTO t(v) VALUES (zeroblob(2000000000))', 'quota_exceeded', 507);
    await refused('query', 'SELECT zeroblob(2000000000)', 'quota_exceeded', 507);
    const r = await p.db('web', 'query', { sql: 'SELECT 1' });
    assert.equal(r.status, 200);
  });

  test('a string or blob parameter over DB_MAX_VALUE_BYTES is refused before it reaches an executor, naming it', async () => {
    const r = await p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (?)', params: ['x'.repeat(20 * 1024)] });
    assert.equal(r.status, 507);
    assert.equal(r.json.error.code, 'quota_exceeded');
    assert.match(r.json.error.message, /request\.params\[0\] is 20480 bytes, over the length limit of 16384 \(DB_MAX_VALUE_BYTES\)/);
    const euros = await p.db('web', 'query', { statements: [{ sql: 'SELECT :v', params: { v: '€'.repeat(6000) } }] });
    assert.match(euros.json.error.message, /statements\[0\]\.params\.v is 18000 bytes/, 'bytes, not characters');
    const blob = await p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (?)', params: [{ $blob: Buffer.alloc(17 * 1024).toString('base64') }] });
    assert.equal(blob.status, 507, blob.text);
    assert.deepEqual(blob.json.error.details, { statement: 0, sqliteCode: 'SQLITE_TOOBIG' }, 'SQLite\'s code for it, as a value computed past the limit gets');
    const hrana = await p.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT length(?)', args: [{ type: 'text', value: 'x'.repeat(20 * 1024) }] } }] }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.equal(hrana.json.results[0].error.code, 'SQLITE_TOOBIG', `over the libSQL protocol too (it was SQLITE_FULL, the code of a full database): ${hrana.text}`);
    const under = await p.db('web', 'execute', { sql: 'INSERT INTO t(v) VALUES (?)', params: ['€'.repeat(3000)] });
    assert.equal(under.status, 200, 'well under the limit (9,000 bytes) it is written');
  });

  test('DB_MAX_VALUE_BYTES bounds each value and each row (as D1\'s "string, BLOB or table row"): a value of exactly the limit is stored', async () => {
    assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE IF NOT EXISTS wide(a, b, c)' })).status, 200);
    const exact = await p.db('web', 'execute', { sql: 'INSERT INTO wide(a, b, c) VALUES (?, 1, NULL)', params: ['x'.repeat(16 * 1024)] });
    assert.equal(exact.status, 200, `a value of exactly 16384 bytes: ${exact.text}`);
    const row = await p.db('web', 'execute', { sql: 'INSERT INTO wide(a, b, c) VALUES (?, ?, ?)', params: ['x'.repeat(16_000), 'y'.repeat(16_000), 'z'.repeat(16_000)] });
    assert.equal(row.status, 507, row.text);
    assert.match(row.json.error.message, /a string, blob or row is over the length limit \(DB_MAX_VALUE_BYTES bounds each string or blob, and each row's values together\)/);
    await refused('query', 'SELECT zeroblob(40000)', 'quota_exceeded', 507);
  });

  test('DB_MAX_RESULT_BYTES counts bytes of the reply as sent, not characters', async () => {
    // 5,000 '€' = 5,000 characters but 15,000 UTF-8 bytes; five of them are 75,000 bytes, over the 64 KiB limit.
    const euros = (n: number) => Array.from({ length: n }, () => "replace(hex(zeroblob(5000)), '00', '€')").join(', ');
    const under = await p.db('web', 'query', { sql: `SELECT ${euros(4)}` });
    assert.equal(under.status, 200, 'four are under the limit');
    assert.ok(Buffer.byteLength(under.text) < 64 * 1024);
    const over = await p.db('web', 'query', { sql: `SELECT ${euros(5)}` });
    assert.equal(over.status, 413, 'five are over it in bytes, though not in characters');
    assert.equal(over.json.error.code, 'result_too_large');
  });

  test('DB_MAX_RESULT_BYTES counts the whole reply: narrow rows\' brackets and commas, object keys, columns', async () => {
    const limit = 64 * 1024;
    let refusedAt = 0;
    for (const [rows, n] of [['arrays', 13_000], ['arrays', 15_000], ['arrays', 17_000], ['objects', 1_500], ['objects', 1_900], ['objects', 2_100]] as const) {
      const r = await p.db('web', 'query', { rows, statements: [{ sql: `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT ${n}) SELECT 1 AS averyveryverylongcolumnname FROM c` }] });
      if (r.status === 200) assert.ok(Buffer.byteLength(r.text) <= limit, `${rows} × ${n}: a reply of ${Buffer.byteLength(r.text)} bytes passed the ${limit}-byte limit`);
      else {
        assert.equal(r.json.error.code, 'result_too_large', r.text);
        refusedAt++;
      }
    }
    assert.ok(refusedAt >= 2, 'the largest of each shape are refused');
  });

  test('a result over DB_MAX_RESULT_BYTES is result_too_large, even an endless one', async () => {
    await refused('query', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x, printf(\'%100d\', x) FROM c', 'result_too_large', 413);
  });

  test('a database at DB_MAX_SIZE_BYTES refuses the write that would cross it and leaves nothing of it; reads go on', async () => {
    const before = await p.db('web', 'status', {});
    const r = await p.db('web', 'execute', { sql: "INSERT INTO t(v) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) SELECT printf('%1000d', x) FROM c" });
    assert.equal(r.status, 507, r.text);
    assert.equal(r.json.error.code, 'quota_exceeded');
    const afterS = await p.db('web', 'status', {});
    assert.equal(afterS.json.version, before.json.version);
    assert.deepEqual(afterS.json.tables, before.json.tables);
  });

  test('more than DB_MAX_DATABASES_PER_REPO databases: the request that would cross it gets 507 and creates nothing', async () => {
    await p.db('limits', 'execute', { database: 'a', sql: 'CREATE TABLE x(a)' });
    await p.db('limits', 'execute', { database: 'b', sql: 'CREATE TABLE x(a)' });
    await p.db('limits', 'execute', { database: 'c', sql: 'CREATE TABLE x(a)' });
    const r = await p.db('limits', 'execute', { database: 'd', sql: 'CREATE TABLE x(a)' });
    assert.equal(r.status, 507);
    assert.equal(r.json.error.code, 'quota_exceeded');
    assert.deepEqual(readdirSync(join(p.dataDir, 'db', 'acme', 'limits')).filter((f) => f.endsWith('.sqlite')).sort(), ['a.sqlite', 'b.sqlite', 'c.sqlite']);
    assert.equal((await p.db('limits', 'query', { database: 'a', sql: 'SELECT 1' })).status, 200, 'reads go on');
  });

  test('a database under creation counts once: an open transaction on a new database, and many writers creating one name', async () => {
    const hrana = (db: string, baton: string | null, sql: string) => p.call(`/quota/_db/${db}/v2/pipeline`, { body: { baton, requests: [{ type: 'execute', stmt: { sql } }] }, headers: { authorization: `Bearer ${p.secret('acme', 'quota')}` } });
    const begun = await hrana('a', null, 'BEGIN');
    assert.equal(begun.json.results[0].type, 'ok', begun.text);
    await hrana('a', begun.json.baton, 'CREATE TABLE x(a)'); // its file exists while the transaction is open
    const creators = await Promise.all(Array.from({ length: 6 }, () => p.db('quota', 'execute', { database: 'b', sql: 'CREATE TABLE IF NOT EXISTS x(a)' })));
    assert.ok(creators.every((r) => r.status === 200), creators.map((r) => r.text).join(' '));
    const third = await p.db('quota', 'execute', { database: 'c', sql: 'CREATE TABLE x(a)' });
    assert.equal(third.status, 200, `a, b and c are 3 databases, the limit: ${third.text}`);
    assert.equal((await p.db('quota', 'execute', { database: 'd', sql: 'CREATE TABLE x(a)' })).status, 507);
    await hrana('a', begun.json.baton, 'COMMIT');
  });

  test('more statements than DB_MAX_STATEMENTS is payload_too_large', async () => {
    const r = await p.db('web', 'execute', { statements: Array.from({ length: 101 }, () => ({ sql: 'SELECT 1' })) });
    assert.equal(r.status, 413);
    assert.equal(r.json.error.code, 'payload_too_large');
  });

  test('a failed first write to a new database leaves no file behind', async () => {
    const r = await p.db('web', 'execute', { database: 'broken', sql: 'INSERT INTO nope VALUES (1)' });
    assert.equal(r.status, 400);
    assert.equal(existsSync(join(p.dataDir, 'db', 'acme', 'web', 'broken.sqlite')), false);
    assert.equal(existsSync(join(p.dataDir, 'db', 'acme', 'web', 'broken.sqlite-wal')), false);
  });
});

describe('query timeout', () => {
  test('an unbounded recursive CTE is stopped with 422 query_timeout, and the database answers again', async () => {
    const started = Date.now();
    await refused('query', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c', 'query_timeout', 422);
    assert.ok(Date.now() - started >= 1000, 'not before the limit');
    const r = await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' });
    assert.equal(r.status, 200);
  });

  test('a runaway write is stopped and leaves nothing behind', async () => {
    const before = await p.db('web', 'status', {});
    const r = await p.db('web', 'execute', { statements: [
      { sql: 'INSERT INTO t(v) VALUES (1)' },
      { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' },
    ] });
    assert.equal(r.status, 422);
    const afterS = await p.db('web', 'status', {});
    assert.equal(afterS.json.version, before.json.version);
    assert.deepEqual(afterS.json.tables, before.json.tables);
  });
});

describe('the temp schema and the reserved prefix, by every path (issue 11)', () => {
  const batch = (database: string, ...sqls: string[]) => p.db('web', 'execute', { database, statements: sqls.map((sql) => ({ sql })) });

  test('schema-qualified temp objects, renames into the prefix and unlisted virtual-table modules are refused; nothing happens', async () => {
    const cases: string[][] = [
      ['CREATE TABLE temp.x(key, value)'],
      ['CREATE TABLE "TEMP".x(key, value)'],
      ['CREATE VIEW temp.v AS SELECT 1'],
      ['CREATE TRIGGER temp.tr AFTER INSERT ON t BEGIN SELECT 1; END'],
      ['CREATE VIRTUAL TABLE temp.s USING dbstat'],
      ['CREATE VIRTUAL TABLE s USING dbstat'],
      ['CREATE VIRTUAL TABLE tok USING fts3tokenize'],
      ['CREATE VIRTUAL TABLE voc USING fts5vocab(t, row)'],
      ['ALTER TABLE t RENAME TO _scopebase_evil'],
      ['ALTER TABLE t RENAME TO "_SCOPEBASE_meta2"'],
      ['CREATE TABLE z(a)', 'ALTER TABLE z RENAME TO _scopebase_z'],
    ];
    for (const sqls of cases) {
      const r = await batch('main', ...sqls);
      assert.equal(r.status, 400, `${sqls.join('; ')}: ${r.text}`);
      assert.equal(r.json.error.code, 'not_allowed', sqls.join('; '));
    }
    const status = await p.db('web', 'status', {});
    assert.ok(status.json.tables.some((t: { name: string }) => t.name === 't'), 't was not renamed away');
    assert.ok(!status.json.tables.some((t: { name: string }) => t.name === 'z'), 'a refused batch leaves nothing');
  });

  test('the reproduction: a temp table renamed over _scopebase_meta cannot shadow the version', async () => {
    const r = await batch('shadow', 'CREATE TABLE temp.x(key, value)', 'ALTER TABLE temp.x RENAME TO _scopebase_meta');
    assert.equal(r.status, 400, r.text);
    const w1 = await p.db('web', 'execute', { database: 'shadow', sql: 'CREATE TABLE k(v)' });
    const w2 = await p.db('web', 'execute', { database: 'shadow', sql: 'INSERT INTO k VALUES (1)' });
    assert.equal(w1.status, 200, w1.text);
    assert.equal(w2.status, 200, w2.text);
    assert.equal(w2.json.version, w1.json.version + 1, 'versions go on from the real _scopebase_meta');
    assert.equal((await p.db('web', 'query', { database: 'shadow', sql: 'SELECT count(*) FROM temp.sqlite_schema' })).json.results[0].rows[0][0], 0, 'the temp schema is empty');
  });

  test('no view, virtual table or key may refer to an internal table (SPEC 4.8, any path); status survives a broken content= table', async () => {
    for (const sql of [
      'CREATE VIEW vw AS SELECT * FROM _scopebase_changes',
      "CREATE VIRTUAL TABLE f USING fts5(event, content='_scopebase_changes')",
      'CREATE TABLE fk(v INTEGER REFERENCES _scopebase_changes(version))',
      "CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT count(*) FROM _scopebase_meta; END",
    ]) {
      const r = await refused('execute', sql, 'not_allowed');
      assert.match(r.json.error.message, /refers to an internal table/, sql);
    }
    const migrated = await p.db('web', 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' }, { id: 'sneaky', sql: 'CREATE VIEW sneaky AS SELECT * FROM _scopebase_migrations' }] });
    assert.equal(migrated.status, 400, migrated.text);
    assert.equal(migrated.json.error.code, 'not_allowed');
    assert.match(migrated.json.error.message, /view sneaky refers to an internal table/);
    // An external-content table whose content table does not exist (yet) is SQLite's to allow: status still answers.
    assert.equal((await p.db('web', 'execute', { sql: "CREATE VIRTUAL TABLE orphan USING fts5(a, content='nosuch')" })).status, 200);
    const status = await p.db('web', 'status', {});
    assert.equal(status.status, 200, status.text);
    assert.equal(status.json.tables.find((x: { name: string }) => x.name === 'orphan').rows, null, 'its rows cannot be counted');
    assert.equal((await p.db('web', 'execute', { sql: 'DROP TABLE orphan' })).status, 200);
  });

  test('full-text search and R*Tree virtual tables are allowed', async () => {
    const r = await batch('fts', 'CREATE VIRTUAL TABLE docs USING fts5(body)', "INSERT INTO docs VALUES ('hello world')", 'CREATE VIRTUAL TABLE box USING rtree(id, x0, x1)');
    assert.equal(r.status, 200, r.text);
    const q = await p.db('web', 'query', { database: 'fts', sql: "SELECT body FROM docs WHERE docs MATCH 'hello'" });
    assert.deepEqual(q.json.results[0].rows, [['hello world']]);
    const w = await p.db('web', 'execute', { database: 'fts', sql: "INSERT INTO docs VALUES ('more')" });
    const events = (await p.db('web', 'changes', { database: 'fts', since: r.json.version - 1 })).json.events;
    assert.deepEqual(events.map((e: { changes: { tables: string[] } }) => e.changes.tables), [['box', 'docs'], ['docs']], 'events name the tables as made, not their shadow tables');
    assert.equal(events[1].version, w.json.version);
    const m = await p.db('web', 'migrate', { database: 'fts', migrations: [{ id: '1', sql: 'CREATE VIRTUAL TABLE notes USING fts5(body); CREATE TABLE plain(x)' }] });
    assert.equal(m.status, 200, m.text);
    assert.deepEqual((await p.db('web', 'changes', { database: 'fts', since: m.json.version - 1 })).json.events[0].changes.tables, ['notes', 'plain'], 'a migration too');
  });
});
