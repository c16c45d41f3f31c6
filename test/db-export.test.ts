// Export (SPEC 4.12) through the proxy: a clean SQLite file and a SQL dump of one consistent snapshot, with exact
// values, that open anywhere and import back to the same content.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { request } from 'undici';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { executorPids } from './helpers/processes.ts';
import { DbHandle } from '../src/db/executor/handles.ts';
import { snapshot } from '../src/db/executor/read-ops.ts';
import { exportDatabase } from '../src/db/executor/export-ops.ts';
import { withSource } from '../src/db/executor/install.ts';
import { splitStatements } from '../src/db/statement-end.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const SETUP = [
  'CREATE TABLE todo(id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, big INTEGER, data BLOB, ratio REAL)',
  'CREATE TABLE nokey(a, b)',
  'CREATE TABLE pair(a INTEGER, b TEXT, v, PRIMARY KEY (a, b))',
  'CREATE TABLE "odd ""name"""(k TEXT PRIMARY KEY, "v w") WITHOUT ROWID',
  'CREATE INDEX todo_title ON todo(title)',
  'CREATE VIEW titles AS SELECT title FROM todo',
  "CREATE TRIGGER stamp AFTER INSERT ON todo BEGIN INSERT INTO nokey VALUES ('trigger', new.id); END",
  'CREATE VIRTUAL TABLE docs USING fts5(body)',
  // Columns that take the rowid's names: the real rowid is reached by the name left over, or by none (r3).
  'CREATE TABLE r2(rowid, v)',
  'CREATE TABLE r3(rowid, _rowid_, oid)',
];
const ROWS = [
  { sql: 'INSERT INTO todo(title, big, data, ratio) VALUES (?, ?, ?, ?)', params: ["it's \"one\"\nwith a newline", { $bigint: '-9223372036854775808' }, { $blob: 'AP8K' }, 0.1] },
  { sql: 'INSERT INTO todo(title, big, data, ratio) VALUES (?, ?, ?, ?)', params: ['ünïcödé ✓', { $bigint: '9223372036854775807' }, null, 1e300] },
  { sql: 'INSERT INTO todo(title, ratio) VALUES (?, ?)', params: ['whole', 2.0] },
  { sql: 'DELETE FROM nokey WHERE b = 2' },
  { sql: 'INSERT INTO pair VALUES (1, ?, ?)', params: ['a', 'x'] },
  { sql: 'INSERT INTO "odd ""name"""("k", "v w") VALUES (?, ?)', params: ['k', 1.5] },
  { sql: 'INSERT INTO docs VALUES (?)', params: ['the quick brown fox'] },
  { sql: 'INSERT INTO docs(rowid, body) VALUES (42, ?)', params: ['lazy dogs'] },
  // The AUTOINCREMENT counter (3) is past the largest id left (2): a new row must not take 3 again.
  { sql: 'DELETE FROM todo WHERE id = 3' },
  { sql: "INSERT INTO r2(rowid, v) VALUES (9, 'a'), (8, 'b')" },
  { sql: "DELETE FROM r2 WHERE v = 'a'" },
  { sql: 'INSERT INTO r3 VALUES (1, 2, 3), (4, 5, 6)' },
];

/** The name that reaches a table's real rowid: the first of rowid, _rowid_, oid that no column takes. */
function rowidName(db: DatabaseSync, table: string): string | null {
  try { db.prepare(`SELECT _rowid_ FROM "${table.replaceAll('"', '""')}" LIMIT 0`); } catch { return null; } // WITHOUT ROWID
  const cols = (db.prepare('SELECT name FROM pragma_table_xinfo(?)').all(table) as { name: string }[]).map((c) => c.name.toLowerCase());
  return ['rowid', '_rowid_', 'oid'].find((n) => !cols.includes(n)) ?? null;
}

/** Every user object and every row (rowids included where a name reaches them) of a local database file, and the AUTOINCREMENT counters. */
function content(db: DatabaseSync): unknown {
  const objects = (db.prepare("SELECT type, name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite%' OR name = 'sqlite_sequence' ORDER BY name").all() as { type: string; name: string; sql: string }[])
    .filter((o) => !o.name.startsWith('_scopebase_') && !o.name.startsWith('docs_'));
  return objects.map((o) => {
    if (o.type !== 'table') return o;
    const rowid = o.name === 'sqlite_sequence' ? null : rowidName(db, o.name);
    const stmt = db.prepare(`SELECT ${rowid ? `${rowid} AS real_rowid, ` : ''}* FROM "${o.name.replaceAll('"', '""')}" ORDER BY 1, 2`);
    stmt.setReadBigInts(true);
    return { ...o, rows: JSON.stringify(stmt.all(), (_k, v) => (typeof v === 'bigint' ? `${v}n` : v instanceof Uint8Array ? Buffer.from(v).toString('hex') : v)) };
  });
}

describe('export', () => {
  let p: Product;
  let dir: string;
  const exportOf = async (body: Record<string, unknown>, secret?: string) => {
    const res = await request(`${p.url}/web/_db/export`, {
      method: 'POST', body: JSON.stringify(body),
      headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${secret ?? p.secret('acme', 'web')}`, 'content-type': 'application/json' },
    });
    return { status: res.statusCode, headers: res.headers, bytes: Buffer.from(await res.body.arrayBuffer()) };
  };
  before(async () => {
    p = await startProduct();
    dir = tempDir('scopebase-export-');
    const made = await p.db('web', 'execute', { statements: [...SETUP.map((sql) => ({ sql })), ...ROWS] });
    assert.equal(made.status, 200, made.text);
  });
  after(async () => {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('sqlite: a clean file (no internal table) holding exactly the database, at the version it says', async () => {
    const version = (await p.db('web', 'status', {})).json.version;
    const r = await exportOf({ format: 'sqlite' });
    assert.equal(r.status, 200, r.bytes.toString());
    assert.equal(r.headers['content-type'], 'application/vnd.sqlite3');
    assert.equal(r.headers['x-db-version'], String(version));
    assert.match(String(r.headers['content-disposition']), /attachment; filename="main.sqlite"/);
    writeFileSync(join(dir, 'export.sqlite'), r.bytes);
    const copy = openSqlite(join(dir, 'export.sqlite'), { readOnly: true });
    assert.deepEqual(copy.prepare("SELECT name FROM sqlite_schema WHERE name LIKE '%scopebase%'").all(), [], 'no internal object');
    assert.equal((copy.prepare('PRAGMA journal_mode').get() as { journal_mode: string }).journal_mode, 'delete', 'opens anywhere, no -wal needed');
    assert.equal(r.bytes.includes(Buffer.from('database.changed')), false, 'no trace of the change log in free pages');
    const live = openSqlite(join(p.dataDir, 'db', 'acme', 'web', 'main.sqlite'), { readOnly: true });
    assert.deepEqual(content(copy), content(live));
    copy.close();
    live.close();
  });

  test('a database whose last AUTOINCREMENT table is gone (its empty sqlite_sequence stays) exports, and restores to before it', async () => {
    const database = 'counters';
    const made = await p.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE kept(v)' }, { sql: "INSERT INTO kept VALUES ('x')" }, { sql: 'CREATE TABLE a(id INTEGER PRIMARY KEY AUTOINCREMENT)' }, { sql: 'INSERT INTO a DEFAULT VALUES' }] });
    assert.equal(made.status, 200, made.text);
    const v = made.json.version;
    assert.deepEqual((await p.db('web', 'changes', { database, since: v - 1 })).json.events[0].changes.tables, ['a', 'kept'], 'SQLite\'s own sqlite_sequence is not a table the user changed');
    assert.equal((await p.db('web', 'execute', { database, sql: 'DROP TABLE a' })).status, 200);
    for (const format of ['sqlite', 'sql']) {
      const r = await exportOf({ database, format });
      assert.equal(r.status, 200, `${format}: ${r.bytes.toString().slice(0, 300)}`);
      assert.ok(r.bytes.includes(Buffer.from('kept')), format);
    }
    const back = await p.db('web', 'restore', { database, toVersion: 1 });
    assert.equal(back.status, 200, back.text);
    assert.deepEqual((await p.db('web', 'query', { database, sql: 'SELECT v FROM kept' })).json.results[0].rows, [['x']]);
  });

  test('a foreign key SQLite can never check (its parent column has no unique index) does not stop its export from importing, nor a rebuild (it stopped both: "foreign key mismatch")', async () => {
    const database = 'mismatch';
    const made = await p.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE x(a)' }, { sql: 'CREATE TABLE y(b REFERENCES x(a))' }, { sql: 'CREATE TABLE p(id INTEGER PRIMARY KEY)' }, { sql: 'CREATE TABLE c(p REFERENCES p(id))' }, { sql: 'INSERT INTO x VALUES (1)' }] });
    assert.equal(made.status, 200, made.text);
    for (const format of ['sqlite', 'sql'] as const) {
      const r = await exportOf({ database, format });
      assert.equal(r.status, 200);
      const back = await p.call(`/web/_db/import?database=${database}-${format}`, { method: 'POST', rawBody: r.bytes, headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': format === 'sql' ? 'application/sql' : 'application/vnd.sqlite3' } });
      assert.equal(back.status, 200, `${format}: ${back.text}`);
      assert.deepEqual((await p.db('web', 'query', { database: `${database}-${format}`, sql: 'SELECT a FROM x' })).json.results[0].rows, [[1]]);
    }
    // A rebuild with foreign keys off checks every key at its end: the ones that can be checked still are.
    const rebuild = (sql: string) => p.db('web', 'execute', { database, statements: [{ sql: 'PRAGMA foreign_keys = OFF' }, { sql }] });
    assert.equal((await rebuild('INSERT INTO x VALUES (2)')).status, 200);
    const orphan = await rebuild('INSERT INTO c VALUES (42)');
    assert.equal(orphan.status, 409, orphan.text);
    assert.match(orphan.json.error.message, /a row of c refers to a missing row of p/);
  });

  test('sql: a dump that sqlite3 and import both load back to the same content, with exact values', async () => {
    const r = await exportOf({ format: 'sql' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-type'], 'application/sql; charset=utf-8');
    const text = r.bytes.toString('utf8');
    assert.match(text, /^PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n/);
    assert.match(text, /COMMIT;\n$/);
    assert.doesNotMatch(text, /_scopebase_/);
    assert.match(text, /-9223372036854775808/);
    assert.match(text, /X'00ff0a'/);
    const local = new DatabaseSync(':memory:');
    local.exec(text);
    const live = openSqlite(join(p.dataDir, 'db', 'acme', 'web', 'main.sqlite'), { readOnly: true });
    assert.deepEqual(content(local), content(live), 'the dump rebuilds the same content');
    assert.deepEqual(local.prepare("SELECT rowid FROM docs WHERE docs MATCH 'fox'").all().length, 1, 'full-text search works on the rebuilt table');
    const imported = await p.call('/web/_db/import?database=again', { method: 'POST', rawBody: r.bytes, headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/sql' } });
    assert.equal(imported.status, 200, imported.text);
    const again = openSqlite(join(p.dataDir, 'db', 'acme', 'web', 'again.sqlite'), { readOnly: true });
    assert.deepEqual(content(again), content(live), 'export → import is the identity');
    assert.deepEqual(text.match(/^INSERT INTO sqlite_sequence .*$/gm), ["INSERT INTO sqlite_sequence VALUES('todo',3);"], 'one counter per table, the live one');
    const next = await p.db('web', 'execute', { database: 'again', sql: "INSERT INTO todo(title) VALUES ('next') RETURNING id" });
    assert.deepEqual(next.json.results[0].rows, [[4]], 'a deleted id is not taken again');
    let sqlite3: string | null = null;
    try { sqlite3 = execFileSync('which', ['sqlite3'], { encoding: 'utf8' }).trim(); } catch { /* not installed */ }
    if (sqlite3) {
      writeFileSync(join(dir, 'dump.sql'), text);
      execFileSync(sqlite3, [join(dir, 'shell.sqlite'), `.read ${join(dir, 'dump.sql')}`]);
      const shell = openSqlite(join(dir, 'shell.sqlite'), { readOnly: true });
      assert.deepEqual(content(shell), content(live), 'the sqlite3 shell loads it too');
    }
    for (const db of [local, live, again]) db.close();
  });

  test('sql: schema, then rows (SPEC 4.12): every table, then every row, then indexes, views and triggers', async () => {
    // A table made before the one it refers to, and a trigger that would add rows if it fired during the load.
    const made = await p.db('web', 'execute', { database: 'ordered', statements: [
      { sql: 'CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL REFERENCES parent(id))' },
      { sql: 'CREATE TABLE parent(id INTEGER PRIMARY KEY, name TEXT)' },
      { sql: 'CREATE TABLE log(what TEXT)' },
      { sql: "CREATE TRIGGER child_log AFTER INSERT ON child BEGIN INSERT INTO log VALUES ('child ' || new.id); END" },
      { sql: 'CREATE INDEX child_parent ON child(parent)' },
      { sql: 'CREATE VIEW named AS SELECT child.id, parent.name FROM child JOIN parent ON parent.id = child.parent' },
      { sql: "INSERT INTO parent VALUES (1, 'one'), (2, 'two')" },
      { sql: 'INSERT INTO child VALUES (10, 1), (11, 2), (12, 2)' },
    ] });
    assert.equal(made.status, 200, made.text);
    const r = await exportOf({ database: 'ordered', format: 'sql' });
    assert.equal(r.status, 200, r.bytes.toString());
    const { statements, rest } = splitStatements(r.bytes.toString('utf8'));
    assert.equal(rest, '');
    const kinds = statements.map((sql) => (/^CREATE (VIRTUAL )?TABLE /.test(sql) ? 'table'
      : /^INSERT INTO /.test(sql) ? 'row'
        : /^CREATE (UNIQUE )?INDEX |^CREATE VIEW |^CREATE TRIGGER /.test(sql) ? 'object' : sql.replace(/;$/, '')));
    const order = kinds.filter((k, i) => k !== kinds[i - 1]);
    assert.deepEqual(order, ['PRAGMA foreign_keys=OFF', 'BEGIN TRANSACTION', 'table', 'row', 'object', 'COMMIT'], statements.join('\n'));
    assert.equal(kinds.filter((k) => k === 'table').length, 3);
    assert.equal(kinds.filter((k) => k === 'row').length, 8, 'two parents, three children, three log rows');
    assert.deepEqual(statements.filter((sql) => /^CREATE (INDEX|VIEW|TRIGGER)/.test(sql)).map((sql) => sql.split(' ')[1]), ['TRIGGER', 'INDEX', 'VIEW'], 'in the order they were made');

    const imported = await p.call('/web/_db/import?database=ordered2', { method: 'POST', rawBody: r.bytes, headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/sql' } });
    assert.equal(imported.status, 200, imported.text);
    assert.deepEqual(imported.json.tables, [{ name: 'child', rows: 3 }, { name: 'log', rows: 3 }, { name: 'parent', rows: 2 }], 'the trigger did not fire on the loaded rows');
    const live = openSqlite(join(p.dataDir, 'db', 'acme', 'web', 'ordered.sqlite'), { readOnly: true });
    const again = openSqlite(join(p.dataDir, 'db', 'acme', 'web', 'ordered2.sqlite'), { readOnly: true });
    assert.deepEqual(content(again), content(live), 'export → import is the identity');
    for (const db of [live, again]) db.close();
    const fired = await p.db('web', 'execute', { database: 'ordered2', sql: 'INSERT INTO child VALUES (13, 1)' });
    assert.equal(fired.status, 200, fired.text);
    const logged = await p.db('web', 'query', { database: 'ordered2', sql: 'SELECT count(*) FROM log' });
    assert.deepEqual(logged.json.results[0].rows, [[4]], 'the trigger is in place after the import');
  });

  test('consistent while writes go on: each write adds two rows, every export holds an even count', async () => {
    await p.db('web', 'execute', { sql: 'CREATE TABLE pairs(n)' });
    let stop = false;
    const writer = (async () => {
      while (!stop) await p.db('web', 'execute', { statements: [{ sql: 'INSERT INTO pairs VALUES (1)' }, { sql: 'INSERT INTO pairs VALUES (2)' }] });
    })();
    try {
      for (let i = 0; i < 5; i++) {
        const r = await exportOf({ format: i % 2 ? 'sql' : 'sqlite' });
        assert.equal(r.status, 200);
        const file = join(dir, `c${i}.${i % 2 ? 'sql' : 'sqlite'}`);
        writeFileSync(file, r.bytes);
        const db = i % 2 ? new DatabaseSync(':memory:') : new DatabaseSync(file, { readOnly: true });
        if (i % 2) db.exec(r.bytes.toString('utf8'));
        const n = Number((db.prepare('SELECT count(*) AS n FROM pairs').get() as { n: number }).n);
        assert.equal(n % 2, 0, `export ${i}: ${n} rows`);
        db.close();
      }
    } finally {
      stop = true;
      await writer;
    }
    // The file goes when its stream closes, a moment after the last byte reached the client.
    for (let i = 0; i < 50 && readdirSync(join(p.dataDir, 'tmp')).length > 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(readdirSync(join(p.dataDir, 'tmp')), [], 'export files are removed once sent');
  });

  test('a rerun after an executor died making the file: a half-written target is replaced, never reused', () => {
    // What the executor does when the scheduler runs a read once more after its process died mid-way (in-process:
    // which process a kill lands on cannot be chosen over HTTP).
    const path = join(dir, 'rerun.sqlite');
    const h = new DbHandle(path, true, { sync: 'normal', maxValueBytes: 1 << 20, maxSizeBytes: 1 << 30, maxResultBytes: 1 << 20, maxOpen: 4, idleCloseMs: 0 });
    try {
      h.internal('CREATE TABLE t(id INTEGER PRIMARY KEY, v)').run();
      h.internal("INSERT INTO t VALUES (1, 'one')").run();
      for (const [name, make] of [
        ['snapshot', (target: string) => snapshot(h, target)],
        ['export sqlite', (target: string) => exportDatabase(h, target, 'sqlite')],
        ['export sql', (target: string) => exportDatabase(h, target, 'sql')],
      ] as const) {
        const target = join(dir, `half-${name.replace(' ', '-')}`);
        writeFileSync(target, 'SQLite format 3\0 half of a file');
        writeFileSync(`${target}.sqlite`, 'half of the SQL export\'s copy');
        const reply = make(target);
        assert.equal(reply.status, 200, `${name}: ${reply.body}`);
        if (name === 'export sql') {
          assert.match(readFileSync(target, 'utf8'), /INSERT INTO "t".*'one'/);
        } else {
          const copy = openSqlite(target, { readOnly: true });
          assert.deepEqual(copy.prepare('SELECT id, v FROM t').all().map((r) => [r.id, r.v]), [[1, 'one']]);
          copy.close();
        }
      }
    } finally {
      h.close();
    }
  });

  test('an export whose executor died twice making it leaves no part of its files in DATA_DIR/tmp', async () => {
    const made = await p.db('web', 'execute', { database: 'big', statements: [
      { sql: 'CREATE TABLE big(id INTEGER PRIMARY KEY, v)' },
      { sql: 'INSERT INTO big(v) SELECT randomblob(40) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000) SELECT x FROM c)' },
    ] });
    assert.equal(made.status, 200, made.text);
    const tmp = join(p.dataDir, 'tmp');
    let answered = false;
    const res = exportOf({ database: 'big', format: 'sql' }).finally(() => (answered = true));
    // Every executor is killed while the file is being made, and again during the rerun: the export fails.
    while (!answered && !readdirSync(tmp).some((f) => f.startsWith('export-'))) await new Promise((r) => setTimeout(r, 5));
    const started = Date.now();
    while (!answered && Date.now() - started < 10_000) {
      await new Promise((r) => setTimeout(r, 100));
      for (const pid of executorPids()) process.kill(pid, 'SIGKILL');
    }
    assert.equal((await res).status, 500);
    assert.deepEqual(readdirSync(tmp), []);
  });

  test('refusals: format, secret, missing database', async () => {
    const bad = await exportOf({ format: 'csv' });
    assert.equal(bad.status, 400);
    assert.match(JSON.parse(bad.bytes.toString()).error.message, /"format" must be/);
    assert.equal((await exportOf({}, 'wrong')).status, 401);
    const missing = await exportOf({ database: 'nothere' });
    assert.equal(missing.status, 404);
    assert.equal(JSON.parse(missing.bytes.toString()).error.code, 'database_not_found');
  });
});

test('an import source that cannot be attached leaves the cached connection with no room for an attach', () => {
  const dir = tempDir();
  const h = new DbHandle(join(dir, 'keep.sqlite'), true, { sync: 'normal', maxValueBytes: 1 << 20, maxSizeBytes: 1 << 30, maxResultBytes: 1 << 20, maxOpen: 4, idleCloseMs: 0 });
  try {
    assert.throws(() => withSource(h, join(dir, 'no-such-dir', 'source.sqlite'), () => 'never'), /unable to open/);
    assert.equal(h.db.limits.attach, 0, 'the attach limit is back to 0');
  } finally {
    h.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
