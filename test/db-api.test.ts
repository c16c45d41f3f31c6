// SPEC 4.3–4.7 through the proxy over real HTTP: query, execute, versions, migrations, status (values and parameters:
// db-values.test.ts; migrations as drizzle-kit and wrangler write them: db-api-drizzle-migrations.test.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const INIT = { id: '0001_init', sql: 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0);' };
const TAGS = { id: '0002_tags', sql: 'CREATE TABLE tags(name TEXT PRIMARY KEY); CREATE INDEX todos_done ON todos(done);' };

describe('migrations (4.6)', () => {
  test('apply, re-send (no change), extend, dry run, and conflict', async () => {
    const first = await p.db('web', 'migrate', { migrations: [INIT] });
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(first.json, { applied: ['0001_init'], alreadyApplied: [], version: 1, dryRun: false });

    const again = await p.db('web', 'migrate', { migrations: [INIT] });
    assert.deepEqual(again.json, { applied: [], alreadyApplied: ['0001_init'], version: 1, dryRun: false });

    const dry = await p.db('web', 'migrate', { migrations: [INIT, TAGS], dryRun: true });
    assert.deepEqual(dry.json, { applied: ['0002_tags'], alreadyApplied: ['0001_init'], version: 1, dryRun: true });
    const afterDry = await p.db('web', 'status', {});
    assert.equal(afterDry.json.migrations.applied, 1);
    assert.ok(!afterDry.json.tables.some((t: { name: string }) => t.name === 'tags'));

    const second = await p.db('web', 'migrate', { migrations: [INIT, TAGS] });
    assert.deepEqual(second.json, { applied: ['0002_tags'], alreadyApplied: ['0001_init'], version: 2, dryRun: false });

    const changed = { id: '0001_init', sql: INIT.sql + ' -- edited' };
    const conflict = await p.db('web', 'migrate', { migrations: [changed, TAGS] });
    assert.equal(conflict.status, 409);
    assert.equal(conflict.json.error.code, 'migration_conflict');
    const sha = (s: string) => createHash('sha256').update(s).digest('hex');
    assert.deepEqual(conflict.json.error.details, { id: '0001_init', appliedChecksum: sha(INIT.sql), requestedChecksum: sha(changed.sql) });

    const missing = await p.db('web', 'migrate', { migrations: [TAGS] });
    assert.equal(missing.status, 409);
    assert.equal(missing.json.error.details.id, '0001_init');
    // Another id where 0001_init stands: both checksums still named (SPEC 4.6), with the id the request has there.
    assert.deepEqual(missing.json.error.details, { id: '0001_init', appliedChecksum: sha(INIT.sql), requestedChecksum: sha(TAGS.sql), requestedId: '0002_tags' });
  });

  test('pending migrations apply all or none', async () => {
    const good = { id: '0001_a', sql: 'CREATE TABLE a(x);' };
    const bad = { id: '0002_b', sql: 'CREATE TABLE b(x); INSERT INTO nope VALUES (1);' };
    const r = await p.db('web', 'migrate', { database: 'atomic', migrations: [good, bad] });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'sql_error');
    assert.equal(r.json.error.details.migration, '0002_b');
    const s = await p.db('web', 'status', { database: 'atomic' });
    assert.equal(s.json.exists, false, 'a failed first migrate leaves no database behind');
  });

  test('ids are validated and unique', async () => {
    for (const migrations of [[{ id: 'bad id', sql: '' }], [{ id: 'a', sql: '' }, { id: 'a', sql: '' }], [{ id: 'x' }], 'nope']) {
      const r = await p.db('web', 'migrate', { database: 'ids', migrations });
      assert.equal(r.status, 400, JSON.stringify(migrations));
      assert.equal(r.json.error.code, 'invalid_request');
    }
  });
});

describe('execute and query (4.3, 4.4, 4.5)', () => {
  test('execute returns rowsAffected, lastInsertRowid, RETURNING rows, and the new version', async () => {
    const v0 = (await p.db('web', 'status', {})).json.version;
    const r = await p.db('web', 'execute', {
      statements: [
        { sql: 'INSERT INTO todos(title) VALUES (?)', params: ['write spec'] },
        { sql: 'INSERT INTO todos(title) VALUES (?) RETURNING id, title', params: ['ship'] },
        { sql: 'SELECT count(*) AS n FROM todos' },
      ],
    });
    assert.equal(r.status, 200, r.text);
    const [a, b, c] = r.json.results;
    assert.equal(a.rowsAffected, 1);
    assert.equal(typeof a.lastInsertRowid, 'number');
    assert.equal(b.rowsAffected, 1);
    assert.equal(b.lastInsertRowid, a.lastInsertRowid + 1);
    assert.deepEqual(b.columns, ['id', 'title']);
    assert.deepEqual(b.rows, [[a.lastInsertRowid + 1, 'ship']]);
    assert.equal(c.rowsAffected, 0);
    assert.equal(c.lastInsertRowid, null);
    assert.equal(r.json.version, v0 + 1, 'one version per committed request, however many statements');
  });

  test('an INSERT into a view (its INSTEAD OF trigger inserts) reports what it inserted itself, with RETURNING too: 0 rows and no rowid (it reported the rows returned, and an internal insert\'s rowid)', async () => {
    const setup = await p.db('web', 'execute', { database: 'views', statements: [
      { sql: 'CREATE TABLE o(id INTEGER PRIMARY KEY, a)' }, { sql: "INSERT INTO o VALUES (1000, 'seed')" }, { sql: 'CREATE VIEW v AS SELECT * FROM o' },
      { sql: 'CREATE TRIGGER tv INSTEAD OF INSERT ON v BEGIN INSERT INTO o(a) VALUES (new.a); END' },
    ] });
    assert.equal(setup.status, 200, setup.text);
    for (const sql of ["INSERT INTO v(a) VALUES ('x')", "INSERT INTO v(a) VALUES ('y') RETURNING a"]) {
      const r = await p.db('web', 'execute', { database: 'views', sql });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual([r.json.results[0].rowsAffected, r.json.results[0].lastInsertRowid], [0, null], `${sql}: ${r.text}`);
    }
    const rows = await p.db('web', 'query', { database: 'views', sql: 'SELECT id, a FROM o ORDER BY id' });
    assert.deepEqual(rows.json.results[0].rows, [[1000, 'seed'], [1001, 'x'], [1002, 'y']], 'the trigger inserted them');
    const plain = await p.db('web', 'execute', { database: 'views', sql: "INSERT INTO o(a) VALUES ('z'), ('w') RETURNING id" });
    assert.deepEqual([plain.json.results[0].rowsAffected, plain.json.results[0].lastInsertRowid], [2, 1004], 'a table\'s RETURNING insert counts as before');
    const upsert = await p.db('web', 'execute', { database: 'views', sql: "INSERT INTO o(id, a) VALUES (1004, 'u') ON CONFLICT(id) DO NOTHING RETURNING id" });
    assert.deepEqual([upsert.json.results[0].rowsAffected, upsert.json.results[0].lastInsertRowid, upsert.json.results[0].rows], [0, null, []]);
  });

  test('a batch is one transaction: a failing statement leaves nothing and names its index', async () => {
    const before = await p.db('web', 'query', { sql: 'SELECT count(*) FROM todos' });
    const r = await p.db('web', 'execute', {
      statements: [
        { sql: 'INSERT INTO todos(title) VALUES (?)', params: ['kept?'] },
        { sql: 'INSERT INTO todos(title) VALUES (NULL)' },
      ],
    });
    assert.equal(r.status, 409);
    assert.equal(r.json.error.code, 'constraint_violation');
    assert.deepEqual(r.json.error.details, { statement: 1, sqliteCode: 'SQLITE_CONSTRAINT_NOTNULL' });
    const afterQ = await p.db('web', 'query', { sql: 'SELECT count(*) FROM todos' });
    assert.deepEqual(afterQ.json, before.json, 'count and version unchanged');
  });

  test('a batch refused for its shape names the statement too (details.statement), before anything runs', async () => {
    const cases: [unknown, string][] = [
      [{ sql: 'SELECT 1; SELECT 2' }, 'sql_error'],
      ['SELECT 1', 'invalid_request'],
      [{ sql: 'SELECT 1', extra: 1 }, 'invalid_request'],
      [{ sql: '' }, 'invalid_request'],
      [{ sql: 'SELECT ?', params: 'x' }, 'invalid_request'],
    ];
    for (const [statement, code] of cases) {
      const r = await p.db('web', 'execute', { statements: [{ sql: 'SELECT 1' }, { sql: 'SELECT 2' }, statement] });
      assert.equal(r.json.error.code, code, JSON.stringify(statement));
      assert.equal(r.json.error.details?.statement, 2, `${JSON.stringify(statement)}: ${r.text}`);
    }
    const lone = await p.db('web', 'query', { sql: 'SELECT 1; SELECT 2' });
    assert.equal(lone.json.error.details?.statement, 0, 'a lone sql is statement 0');
  });

  test('constraint kinds map to constraint_violation with their SQLite code', async () => {
    await p.db('web', 'execute', { database: 'cons', statements: [
      { sql: 'CREATE TABLE parent(id INTEGER PRIMARY KEY)' },
      { sql: 'CREATE TABLE child(id INTEGER PRIMARY KEY, p INTEGER REFERENCES parent(id), n INTEGER CHECK (n > 0), u TEXT UNIQUE)' },
      { sql: "INSERT INTO child(id, n, u) VALUES (1, 1, 'x')" },
    ] });
    const cases: [string, string][] = [
      ['INSERT INTO child(id, p, n) VALUES (2, 99, 1)', 'SQLITE_CONSTRAINT_FOREIGNKEY'],
      ['INSERT INTO child(id, n) VALUES (3, 0)', 'SQLITE_CONSTRAINT_CHECK'],
      ["INSERT INTO child(id, n, u) VALUES (4, 1, 'x')", 'SQLITE_CONSTRAINT_UNIQUE'],
      ['INSERT INTO child(id, n) VALUES (1, 1)', 'SQLITE_CONSTRAINT_PRIMARYKEY'],
    ];
    for (const [sql, code] of cases) {
      const r = await p.db('web', 'execute', { database: 'cons', sql });
      assert.equal(r.status, 409, sql);
      assert.equal(r.json.error.details.sqliteCode, code);
    }
  });

  test('a statement that failed leaves nothing behind for its next run with other values (it is cached)', async () => {
    await p.db('web', 'execute', { database: 'stale', sql: 'CREATE TABLE u(id INTEGER PRIMARY KEY, v TEXT UNIQUE)' });
    const insert = (v: string) => p.db('web', 'execute', { database: 'stale', sql: 'INSERT INTO u(v) VALUES (?) RETURNING id', params: [v] });
    assert.equal((await insert('a')).status, 200);
    assert.equal((await insert('a')).status, 409);
    const b = await insert('b');
    assert.equal(b.status, 200, `a new value after a UNIQUE failure: ${b.text}`);
    const rows = await p.db('web', 'query', { database: 'stale', sql: 'SELECT v FROM u ORDER BY id' });
    assert.deepEqual(rows.json.results[0].rows, [['a'], ['b']]);
    const json = (text: string) => p.db('web', 'query', { database: 'stale', sql: 'SELECT json(?)', params: [text] });
    assert.equal((await json('{bad')).status, 400);
    const ok = await json('{}');
    assert.equal(ok.status, 200, `a read after a failed read of the same text: ${ok.text}`);
  });

  test('rows touched but left as they were change nothing: no version, no event, and the database is as before', async () => {
    const db = 'noop';
    await p.db('web', 'execute', { database: db, statements: [{ sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY AUTOINCREMENT, v)' }, { sql: 'INSERT INTO t(v) VALUES (1), (2)' }, { sql: 'CREATE TABLE nokey(v)' }, { sql: 'INSERT INTO nokey VALUES (1)' }] });
    const v = (await p.db('web', 'status', { database: db })).json.version;
    for (const statements of [
      [{ sql: 'UPDATE t SET v = v' }],
      [{ sql: 'INSERT INTO t(v) VALUES (3)' }, { sql: 'DELETE FROM t WHERE v = 3' }],
      [{ sql: 'INSERT OR REPLACE INTO t(id, v) VALUES (1, 1)' }],
    ]) {
      const r = await p.db('web', 'execute', { database: db, statements });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.version, v, JSON.stringify(statements));
    }
    assert.deepEqual((await p.db('web', 'changes', { database: db, since: v })).json.events, [], 'no notification');
    const next = await p.db('web', 'execute', { database: db, sql: 'INSERT INTO t(v) VALUES (4) RETURNING id' });
    assert.deepEqual(next.json.results[0].rows, [[3]], 'the AUTOINCREMENT counter did not move: the insert undone was undone whole');
    assert.equal(next.json.version, v + 1, 'a real change still makes a version');
    // A table without a key: whether an UPDATE changed anything is not known (no changeset shows it): it counts.
    assert.equal((await p.db('web', 'execute', { database: db, sql: 'UPDATE nokey SET v = v' })).json.version, v + 2);
  });

  test('what a changeset cannot show is never taken for no change: rows with a NULL key, a trigger made after the statement was first run', async () => {
    const db = 'nullkey';
    await p.db('web', 'execute', { database: db, statements: [{ sql: 'CREATE TABLE n(k TEXT PRIMARY KEY, v)' }, { sql: "INSERT INTO n VALUES (NULL, 1), ('a', 1)" }, { sql: 'CREATE TABLE c(a INT, b TEXT, v, PRIMARY KEY(a, b))' }, { sql: "INSERT INTO c VALUES (1, NULL, 'x')" }] });
    let v = (await p.db('web', 'status', { database: db })).json.version;
    for (const sql of ['UPDATE n SET v = 2 WHERE k IS NULL', "UPDATE c SET v = 'changed'", 'DELETE FROM n WHERE k IS NULL']) {
      const r = await p.db('web', 'execute', { database: db, sql });
      assert.equal(r.json.version, ++v, `${sql}: a change, kept`);
    }
    assert.deepEqual((await p.db('web', 'query', { database: db, statements: [{ sql: 'SELECT * FROM n' }, { sql: 'SELECT v FROM c' }] })).json.results.map((x: { rows: unknown[] }) => x.rows), [[['a', 1]], [['changed']]]);
    const events = (await p.db('web', 'changes', { database: db, since: v - 3 })).json.events as { changeset: string | null }[];
    assert.deepEqual(events.map((e) => e.changeset), [null, null, null], 'no changeset could carry those rows: mirrors take a snapshot');
    // The same key with no NULL in it, before or after: the changeset shows every row, and can tell no change.
    assert.equal((await p.db('web', 'execute', { database: db, sql: 'INSERT INTO n VALUES (NULL, 5)' })).json.version, ++v);
    const u = await p.db('web', 'execute', { database: db, statements: [{ sql: 'DELETE FROM n WHERE k IS NULL' }, { sql: "INSERT INTO n VALUES ('b', 2)" }] });
    assert.equal(u.json.version, ++v);
    assert.equal((await p.db('web', 'execute', { database: db, sql: "UPDATE n SET v = v WHERE k = 'b'" })).json.version, v, 'no NULL key: an update to the same values changes nothing');
    assert.equal((await p.db('web', 'execute', { database: db, sql: "UPDATE n SET v = 3 WHERE k = 'b'" })).json.version, ++v);
    const shown = (await p.db('web', 'changes', { database: db, since: v - 3 })).json.events as { changeset: string | null }[];
    assert.deepEqual(shown.map((e) => e.changeset === null), [true, true, false], 'a NULL key made, then removed: snapshots; none before or after: a changeset');
    // The statement's findings (which tables it writes) are those of the schema it runs under, not the one it was first prepared under.
    await p.db('web', 'execute', { database: db, statements: [{ sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v)' }, { sql: "INSERT INTO t VALUES (1, 'a')" }] });
    for (let i = 0; i < 4; i++) await p.db('web', 'execute', { database: db, sql: 'UPDATE t SET v = v WHERE id = 1' }); // cached on every executor
    await p.db('web', 'execute', { database: db, statements: [{ sql: 'CREATE TABLE log(msg TEXT)' }, { sql: "CREATE TRIGGER tr AFTER UPDATE ON t BEGIN INSERT INTO log VALUES ('u'); END" }] });
    for (let i = 0; i < 4; i++) await p.db('web', 'execute', { database: db, sql: 'UPDATE t SET v = v WHERE id = 1' });
    assert.deepEqual((await p.db('web', 'query', { database: db, sql: 'SELECT count(*) FROM log' })).json.results[0].rows, [[4]], 'every trigger row kept');
  });

  test('a request that changes nothing keeps the version', async () => {
    const v = (await p.db('web', 'status', {})).json.version;
    const r = await p.db('web', 'execute', { sql: 'UPDATE todos SET done = 1 WHERE id = -1' });
    assert.equal(r.json.version, v);
    const sel = await p.db('web', 'execute', { sql: 'SELECT 1' });
    assert.equal(sel.json.version, v);
    const events = await p.db('web', 'changes', { since: v });
    assert.deepEqual(events.json.events, [], 'and records no notification');
  });

  test('query reads all statements from one snapshot and reports its version', async () => {
    const r = await p.db('web', 'query', { statements: [{ sql: 'SELECT count(*) FROM todos' }, { sql: 'SELECT max(id) FROM todos' }] });
    assert.equal(r.status, 200);
    assert.equal(r.json.results.length, 2);
    assert.equal(r.json.version, (await p.db('web', 'status', {})).json.version);
  });

  test('rows as objects', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT id, title FROM todos ORDER BY id LIMIT 1', rows: 'objects' });
    assert.deepEqual(Object.keys(r.json.results[0].rows[0]), ['id', 'title']);
  });

  test('a write sent to query is read_only', async () => {
    for (const sql of ['INSERT INTO todos(title) VALUES (1)', 'DELETE FROM todos', 'CREATE TABLE x(a)', 'DROP TABLE todos', 'UPDATE todos SET done = 1']) {
      const r = await p.db('web', 'query', { sql });
      assert.equal(r.status, 400, sql);
      assert.equal(r.json.error.code, 'read_only', sql);
    }
  });

  test('query of a database that does not exist is 404 database_not_found, and creates nothing', async () => {
    const r = await p.db('web', 'query', { database: 'ghost', sql: 'SELECT 1' });
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'database_not_found');
    assert.ok(!(await p.db('web', 'status', {})).json.databases.includes('ghost'));
  });

  test('execute creates the database when it does not exist', async () => {
    const r = await p.db('web', 'execute', { database: 'fresh', sql: 'CREATE TABLE t(x)' });
    assert.equal(r.status, 200);
    assert.equal(r.json.version, 1);
  });

  test('sql errors are sql_error with SQLite\'s message', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT * FROM no_such_table' });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'sql_error');
    assert.match(r.json.error.message, /no such table: no_such_table/);
  });
});

describe('status (4.7)', () => {
  test('reports version, size, tables with row counts, migrations and databases; hides internal tables', async () => {
    const s = await p.db('web', 'status', {});
    assert.equal(s.status, 200);
    assert.equal(s.json.database, 'main');
    assert.equal(s.json.exists, true);
    assert.ok(s.json.sizeBytes > 0);
    assert.deepEqual(s.json.migrations, { applied: 2, latest: '0002_tags' });
    const names = s.json.tables.map((t: { name: string }) => t.name);
    assert.deepEqual(names, ['tags', 'todos']);
    assert.ok(!names.some((n: string) => n.startsWith('_scopebase_')));
    const count = (await p.db('web', 'query', { sql: 'SELECT count(*) FROM todos' })).json.results[0].rows[0][0];
    assert.equal(s.json.tables.find((t: { name: string }) => t.name === 'todos').rows, count);
    assert.deepEqual(s.json.mirrors, []);
    assert.ok(s.json.databases.includes('main') && s.json.databases.includes('noop'));
    assert.deepEqual(s.json.databases, [...s.json.databases].sort());
  });

  test('a database that does not exist: 200 with exists false and the databases list', async () => {
    const s = await p.db('web', 'status', { database: 'nothing' });
    assert.equal(s.status, 200);
    assert.equal(s.json.exists, false);
    assert.ok(Array.isArray(s.json.databases));
  });

  test('status accepts an empty body (curl without -d)', async () => {
    const s = await p.db('web', 'status', undefined, { rawBody: '' });
    assert.equal(s.status, 200);
    assert.equal(s.json.database, 'main');
  });
});

describe('one statement per sql (4.2)', () => {
  test('a second statement in one sql is refused and nothing runs', async () => {
    const before = await p.db('web', 'status', {});
    const r = await p.db('web', 'execute', { sql: "INSERT INTO todos(title) VALUES ('a'); INSERT INTO todos(title) VALUES ('b')" });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'sql_error');
    assert.equal((await p.db('web', 'status', {})).json.version, before.json.version);
  });
});
