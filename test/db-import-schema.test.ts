// Import (SPEC 4.12, 4.8) and the schema a file or text brings: sqlite3 .dump's form for virtual tables loads, a
// schema that calls a function a schema may not is the caller's error (400, never 500), and a failed import is
// logged naming its own database file.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { call, ROOT_KEY, spawnProduct, startProduct, tempDir, testEnv, type Product } from './helpers/product.ts';
import { rowsOf, sampleFile, upload } from './helpers/imports.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

/**
 * A file whose objects have the texts `edits` gives (name → sql), written into its schema as a hostile file would
 * have them (SQLite itself refuses to create most of these): `setup` makes harmless objects of those names first.
 */
function schemaFile(dir: string, setup: string, edits: Record<string, string>): Buffer {
  const path = join(dir, `schema-${Math.random().toString(36).slice(2)}.sqlite`);
  const db = openSqlite(path);
  db.exec(setup);
  db.enableDefensive(false);
  db.exec('PRAGMA writable_schema=ON');
  for (const [name, sql] of Object.entries(edits)) db.prepare('UPDATE sqlite_schema SET sql = ? WHERE name = ?').run(sql, name);
  db.exec('PRAGMA writable_schema=OFF');
  db.close();
  return readFileSync(path);
}

/**
 * What `sqlite3 .dump` (3.40.1) writes for a database with an fts5 table and an R*Tree: each virtual table as a row
 * forced into sqlite_schema, then its shadow tables and their rows. Copied from its output; only the R*Tree node's
 * trailing zeros are written as a repeat.
 */
const SHELL_DUMP = `PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE note(id integer primary key, title text);
INSERT INTO note VALUES(1,'it''s');
PRAGMA writable_schema=ON;
INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','f','f',0,'CREATE VIRTUAL TABLE f using fts5(body, tokenize=''porter ascii'')');
CREATE TABLE IF NOT EXISTS 'f_data'(id INTEGER PRIMARY KEY, block BLOB);
INSERT INTO f_data VALUES(1,X'0206');
INSERT INTO f_data VALUES(10,X'000000000101010001010101');
INSERT INTO f_data VALUES(137438953473,X'00000039063062726f776e0102040103646f672a02030103666f7801020501046c617a692a02020105717569636b0102030103746865010202040a0808090a');
CREATE TABLE IF NOT EXISTS 'f_idx'(segid, term, pgno, PRIMARY KEY(segid, term)) WITHOUT ROWID;
INSERT INTO f_idx VALUES(1,X'',2);
CREATE TABLE IF NOT EXISTS 'f_content'(id INTEGER PRIMARY KEY, c0);
INSERT INTO f_content VALUES(1,'the quick brown fox');
INSERT INTO f_content VALUES(42,'lazy dogs');
CREATE TABLE IF NOT EXISTS 'f_docsize'(id INTEGER PRIMARY KEY, sz BLOB);
INSERT INTO f_docsize VALUES(1,X'04');
INSERT INTO f_docsize VALUES(42,X'02');
CREATE TABLE IF NOT EXISTS 'f_config'(k PRIMARY KEY, v) WITHOUT ROWID;
INSERT INTO f_config VALUES('version',4);
INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','r','r',0,'CREATE VIRTUAL TABLE r using rtree(id, minx, maxx, miny, maxy)');
CREATE TABLE IF NOT EXISTS "r_rowid"(rowid INTEGER PRIMARY KEY,nodeno);
INSERT INTO r_rowid VALUES(7,1);
INSERT INTO r_rowid VALUES(9,1);
CREATE TABLE IF NOT EXISTS "r_node"(nodeno INTEGER PRIMARY KEY,data);
INSERT INTO r_node VALUES(1,X'0000000200000000000000070000000040a00000bf8000003fc0000000000000000000094000000040400000400000004080${'0'.repeat(2356)}');
CREATE TABLE IF NOT EXISTS "r_parent"(nodeno INTEGER PRIMARY KEY,parentnode);
PRAGMA writable_schema=OFF;
COMMIT;
`;

/** Every table of a database file, shadow tables included, with every row: what a dump must give back. */
function allTables(path: string): unknown {
  const db = openSqlite(path, { readOnly: true });
  try {
    const tables = db.prepare("SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite%' AND name NOT LIKE '\\_scopebase\\_%' ESCAPE '\\' ORDER BY name").all() as { name: string; sql: string }[];
    return tables.map((t) => ({ ...t, rows: t.sql.startsWith('CREATE VIRTUAL') ? null : JSON.stringify(db.prepare(`SELECT * FROM "${t.name}" ORDER BY 1`).all(), (_k, v) => (v instanceof Uint8Array ? Buffer.from(v).toString('hex') : v)) }));
  } finally {
    db.close();
  }
}


describe('import: schemas', () => {
  let p: Product;
  let dir: string;
  before(async () => {
    p = await startProduct({ DB_MAX_LOOP_DELAY_MS: '0' }); // not about overload: a loaded machine's late loop sheds reads (503)
    dir = tempDir('scopebase-import-schema-');
  });
  after(async () => {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('SQL text with full-text and R*Tree tables, as sqlite3 .dump writes them (writable_schema), imports the same content', async () => {
    const r = await upload(p, 'imp', 'database=shell', SHELL_DUMP, 'application/sql');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.tables.filter((t: { name: string }) => ['f', 'note', 'r'].includes(t.name)), [{ name: 'f', rows: 2, virtual: true, module: 'fts5' }, { name: 'note', rows: 1 }, { name: 'r', rows: 2, virtual: true, module: 'rtree' }]);
    assert.deepEqual(await rowsOf(p, 'imp', "SELECT rowid, body FROM f WHERE f MATCH 'dog'", 'shell'), [[42, 'lazy dogs']], 'the index works, stemmed as its tokenizer says');
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT id FROM r WHERE minx <= 2.5 AND maxx >= 2.5 ORDER BY id', 'shell'), [[7], [9]]);
    assert.deepEqual(await rowsOf(p, 'imp', "SELECT sql FROM sqlite_schema WHERE name = 'f'", 'shell'), [["CREATE VIRTUAL TABLE f using fts5(body, tokenize='porter ascii')"]]);
    assert.deepEqual(await rowsOf(p, 'imp', 'PRAGMA integrity_check', 'shell'), [['ok']]);
    // The same as the sqlite3 shell makes of it: every shadow table row for row.
    const local = join(dir, 'shell.sqlite');
    const shell = openSqlite(local);
    shell.enableDefensive(false);
    shell.exec(SHELL_DUMP);
    shell.close();
    assert.deepEqual(allTables(join(p.dataDir, 'db', 'acme', 'imp', 'shell.sqlite')), allTables(local));
    const write = await p.db('imp', 'execute', { database: 'shell', statements: [{ sql: "INSERT INTO f(rowid, body) VALUES (43, 'dogs again')" }, { sql: 'INSERT INTO r VALUES (10, 0, 1, 0, 1)' }] });
    assert.equal(write.status, 200, write.text);
    assert.deepEqual(await rowsOf(p, 'imp', "SELECT rowid FROM f WHERE f MATCH 'dog' ORDER BY rowid", 'shell'), [[42], [43]]);

    // Only that exact form: writable_schema never opens up otherwise, and the sandbox judges the table it makes.
    const form = (row: string, then = '') => `CREATE TABLE a(x);\nPRAGMA writable_schema=ON;\n${row}\n${then}PRAGMA writable_schema=OFF;\n`;
    const refused: [string, string, number, RegExp][] = [
      ['a plain table', form("INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','t','t',0,'CREATE TABLE t(x)');"), 400, /statement 2 of the SQL text: .*(not allowed|may not be modified)/],
      ['another module', form("INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','v','v',0,'CREATE VIRTUAL TABLE v USING fts5vocab(''f'', ''row'')');"), 400, /statement 2 .*fts5vocab/],
      ['two statements', form("INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','v','v',0,'CREATE VIRTUAL TABLE v USING fts5(x); DROP TABLE a');"), 400, /statement 2 .*more than one statement/],
      ['other schema writes', form("UPDATE sqlite_schema SET sql = 'CREATE TABLE a(x, y)' WHERE name = 'a';"), 400, /statement 2 .*(not allowed|may not be modified)/],
      ['a shadow row outside the form', `${form("INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','v','v',0,'CREATE VIRTUAL TABLE v USING fts5(x)');")}INSERT INTO v_data VALUES(5, X'00');\n`, 400, /statement 4 of the SQL text/],
      ['rows that are no index', form("INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','v','v',0,'CREATE VIRTUAL TABLE v USING fts5(x)');", "INSERT INTO v_data VALUES(1,X'0206');\nINSERT INTO v_data VALUES(137438953473,X'deadbeef');\nINSERT INTO v_content VALUES(1,'x');\nINSERT INTO v_docsize VALUES(1,X'01');\n"), 400, /virtual table v are not a sound index/],
    ];
    for (const [what, text, status, message] of refused) {
      const bad = await upload(p, 'imp', 'database=notshell', text, 'application/sql');
      assert.equal(bad.status, status, `${what}: ${bad.text}`);
      assert.match(bad.json.error.message, message, what);
    }
    assert.equal((await p.db('imp', 'status', { database: 'notshell' })).json.exists, false);
  });

  test('a schema that calls a function a schema may not (load_extension, fts3_tokenizer) is 400 not_allowed naming it, never 500', async () => {
    const made = await upload(p, 'unsafe', 'database=h1', sampleFile(dir).bytes);
    assert.equal(made.status, 200, made.text);
    // Each loads only with trusted_schema=ON, which the executor's connections never have.
    const cases: [string, Buffer, RegExp][] = [
      ['CHECK', schemaFile(dir, 'CREATE TABLE t(a CHECK (abs(a)))', { t: "CREATE TABLE t(a CHECK (load_extension('x') IS NULL))" }), /load_extension\(\) in t\b/],
      ['generated column', schemaFile(dir, 'CREATE TABLE t(a, b AS (abs(a)))', { t: 'CREATE TABLE t(a, b AS (load_extension(a)))' }), /load_extension\(\) in t\b/],
      ['index on an expression', schemaFile(dir, 'CREATE TABLE t(a); CREATE INDEX i ON t(abs(a))', { i: 'CREATE INDEX i ON t(load_extension(a))' }), /load_extension\(\) in i\b/],
      ['partial index', schemaFile(dir, 'CREATE TABLE t(a); CREATE INDEX i ON t(a) WHERE abs(a)', { i: 'CREATE INDEX i ON t(a) WHERE load_extension(a)' }), /load_extension\(\) in i\b/],
      ['view', schemaFile(dir, 'CREATE TABLE t(a); CREATE VIEW v AS SELECT abs(a) FROM t', { v: 'CREATE VIEW v AS SELECT load_extension(a) FROM t' }), /load_extension\(\) in view v\b/],
      ['fts3_tokenizer', schemaFile(dir, 'CREATE TABLE t(a CHECK (abs(a)))', { t: "CREATE TABLE t(a CHECK (fts3_tokenizer('simple') IS NOT NULL))" }), /fts3_tokenizer\(\) in t\b/],
    ];
    for (const [what, bytes, message] of cases) {
      for (const query of ['database=h1&mode=replace', 'database=h2']) {
        const r = await upload(p, 'unsafe', query, bytes);
        assert.equal(r.status, 400, `${what}: ${r.text}`);
        assert.equal(r.json.error.code, 'not_allowed', what);
        assert.match(r.json.error.message, message, what);
      }
    }
    assert.equal((await p.db('unsafe', 'status', { database: 'h1' })).json.version, 1, 'nothing changed');
    assert.equal((await p.db('unsafe', 'status', { database: 'h2' })).json.exists, false, 'no database was left');
    // A DEFAULT or a trigger body is only run when used: imported, then refused like the same call in execute.
    const later = schemaFile(dir, 'CREATE TABLE t(a, b DEFAULT (abs(1))); CREATE TABLE u(x); CREATE TRIGGER tr AFTER INSERT ON u BEGIN SELECT abs(new.x); END', {
      t: "CREATE TABLE t(a, b DEFAULT (load_extension('x')))",
      tr: 'CREATE TRIGGER tr AFTER INSERT ON u BEGIN SELECT load_extension(new.x); END',
    });
    const imported = await upload(p, 'unsafe', 'database=h3', later);
    assert.equal(imported.status, 200, imported.text);
    const useDefault = await p.db('unsafe', 'execute', { database: 'h3', sql: 'INSERT INTO t(a) VALUES (1)' });
    assert.equal(useDefault.status, 400, useDefault.text);
    const fire = await p.db('unsafe', 'execute', { database: 'h3', sql: "INSERT INTO u VALUES ('x')" });
    assert.equal(fire.status, 400, fire.text);
    assert.equal(fire.json.error.code, 'not_allowed');
  });
});

describe('import: a crafted file runs nothing outside the sandbox (attack round, 2026-11-26)', () => {
  let p: Product;
  let dir: string;
  before(async () => {
    p = await startProduct();
    dir = tempDir('scopebase-import-crafted-');
    assert.equal((await p.db('app', 'execute', { sql: 'CREATE TABLE secrets(k)' }, { org: 'victim' })).status, 200);
    assert.equal((await p.db('app', 'execute', { sql: "INSERT INTO secrets VALUES ('victim-secret')" }, { org: 'victim' })).status, 200);
  });
  after(async () => {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A sound file whose table t's schema text is `sql` (and its tbl_name `tbl`): SQLite loads it, integrity_check says ok. */
  function crafted(sql: string, tbl = 't', setup = 'CREATE TABLE t(a); INSERT INTO t VALUES (1)', name = 't'): Buffer {
    const path = join(dir, `crafted-${Math.random().toString(36).slice(2)}.sqlite`);
    const db = openSqlite(path);
    db.exec(`PRAGMA journal_mode=DELETE; ${setup}`);
    db.enableDefensive(false);
    db.exec('PRAGMA writable_schema=ON');
    db.prepare('UPDATE sqlite_schema SET sql = ?, tbl_name = ? WHERE name = ?').run(sql, tbl, name);
    db.exec('PRAGMA writable_schema=OFF');
    db.close();
    return readFileSync(path);
  }

  test('SQL after an object\'s CREATE statement (leave the transaction, swap the attached file for another org\'s, the account store) is refused, and none of it runs', async () => {
    const victim = join(p.dataDir, 'db', 'victim', 'app', 'main.sqlite');
    const accounts = join(p.dataDir, 'accounts.sqlite');
    const files = [
      crafted('CREATE TABLE t(a); CREATE TABLE leak AS SELECT * FROM pragma_database_list'),
      crafted(`CREATE TABLE t(a); COMMIT; DETACH src; ATTACH '${victim}' AS src; CREATE TABLE stolen AS SELECT * FROM src.secrets; UPDATE src.secrets SET k = 'overwritten'; DETACH src; ATTACH '${accounts}' AS src; CREATE TABLE users AS SELECT * FROM src.users; BEGIN`),
      crafted('CREATE TABLE t(a) -- a comment;\n; CREATE TABLE leak(x)'),
    ];
    for (const bytes of files) {
      for (const query of ['database=main&mode=replace', 'database=fresh']) {
        const r = await upload(p, 'x', query, bytes);
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error.code, 'not_allowed');
        assert.match(r.json.error.message, /more SQL after its CREATE statement/);
      }
    }
    assert.equal((await p.db('x', 'query', { sql: 'SELECT 1' })).status, 404, 'nothing was made');
    assert.equal((await p.db('x', 'query', { database: 'fresh', sql: 'SELECT 1' })).status, 404);
    assert.deepEqual((await p.db('app', 'query', { sql: 'SELECT k FROM secrets' }, { org: 'victim' })).json.results[0].rows, [['victim-secret']], 'the other org\'s data is as it was');
  });

  test('a view naming main.t loads alone but not once attached: 400 saying so, not a 500 about the repo\'s database', async () => {
    const path = join(dir, 'main-view.sqlite');
    const db = openSqlite(path);
    db.exec('PRAGMA journal_mode=DELETE; CREATE TABLE t(a); INSERT INTO t VALUES (1); CREATE VIEW v AS SELECT 1');
    db.enableDefensive(false);
    db.exec('PRAGMA writable_schema=ON');
    db.prepare("UPDATE sqlite_schema SET sql = 'CREATE VIEW v AS SELECT * FROM main.t' WHERE name = 'v'").run();
    db.exec('PRAGMA writable_schema=OFF');
    db.close();
    assert.equal((await p.db('v6', 'execute', { sql: 'CREATE TABLE keep(x)' })).status, 200);
    const r = await upload(p, 'v6', 'database=main&mode=replace', readFileSync(path));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_request');
    assert.match(r.json.error.message, /does not load once attached.*view v cannot reference objects in database main/);
    assert.equal((await p.db('v6', 'status', {})).status, 200, 'the repo\'s database is as it was');
  });

  test('an object on an internal table (by its tbl_name), a virtual table whose name hides its module, a table made from a query: refused or made under the sandbox', async () => {
    const onInternal = crafted('CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END', '_scopebase_meta', 'CREATE TABLE t(a); CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END', 'tr');
    let r = await upload(p, 'y', 'database=a', onInternal);
    assert.equal(r.status, 400, r.text); // SQLite itself finds such a schema malformed; the import checks tbl_name too
    // `.+? USING` once stopped at the USING inside the quoted name, and took this for an fts5 table.
    const vt = join(dir, 'vt.sqlite');
    const v = openSqlite(vt);
    v.exec('PRAGMA journal_mode=DELETE; CREATE TABLE t(a); CREATE VIRTUAL TABLE "v USING fts5 x" USING dbstat');
    v.close();
    r = await upload(p, 'y', 'database=b', readFileSync(vt));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'not_allowed');
    assert.match(r.json.error.message, /module dbstat/);
    // A schema row may read as CREATE TABLE … AS SELECT: made as the repo's own SQL, under its sandbox.
    r = await upload(p, 'y', 'database=c', crafted('CREATE TABLE t AS SELECT * FROM pragma_database_list'));
    assert.notEqual(r.status, 200, 'no table of the server\'s file paths');
    assert.ok(r.status < 500, r.text);
    for (const database of ['a', 'b', 'c']) assert.equal((await p.db('y', 'query', { database, sql: 'SELECT 1' })).status, 404, database);
  });

  // Attack round 2: no trigger on a virtual table's shadow table, by any order of a file's schema or any SQL text.
  test('a file listing a trigger on f_data before its fts5 table (so it loads) is refused; the database stays usable', async () => {
    const path = join(dir, 'shadow.sqlite');
    const db = openSqlite(path);
    db.enableDefensive(false);
    db.exec("PRAGMA journal_mode=DELETE; CREATE VIRTUAL TABLE f USING fts5(a); INSERT INTO f VALUES ('hello world'); CREATE TABLE log(x)");
    db.exec('PRAGMA writable_schema=ON');
    const row = db.prepare("SELECT * FROM sqlite_schema WHERE name = 'f'").get() as Record<string, string | number>;
    db.prepare("DELETE FROM sqlite_schema WHERE name = 'f'").run();
    db.prepare("INSERT INTO sqlite_schema(type, name, tbl_name, rootpage, sql) VALUES ('trigger', 'tr', 'f_data', 0, 'CREATE TRIGGER tr AFTER INSERT ON f_data BEGIN UPDATE f_data SET block = x''ffff'' WHERE id = 10; END')").run();
    db.prepare('INSERT INTO sqlite_schema(type, name, tbl_name, rootpage, sql) VALUES (?, ?, ?, ?, ?)').run(row.type!, row.name!, row.tbl_name!, row.rootpage!, row.sql!);
    db.exec('PRAGMA writable_schema=OFF');
    db.close();
    assert.equal((await p.db('x', 'execute', { sql: 'CREATE TABLE keep(v)' })).status, 200);
    const r = await upload(p, 'x', 'database=main&mode=replace', readFileSync(path));
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'not_allowed');
    assert.match(r.json.error.message, /shadow table/);
    assert.equal((await p.db('x', 'status', {})).status, 200, 'the database still loads');
    assert.deepEqual((await p.db('x', 'query', { sql: "SELECT name FROM sqlite_schema WHERE type = 'trigger'" })).json.results[0].rows, []);
  });

  test('a .dump of an fts5 table whose shadow row hides a trigger on f_data behind a $a(\'x) parameter (read as a string, it hid the trigger) is refused', async () => {
    const src = new DatabaseSync(':memory:');
    src.exec("CREATE VIRTUAL TABLE f USING fts5(a); INSERT INTO f VALUES ('hello world')");
    const lit = (v: unknown) => (v === null ? 'NULL' : v instanceof Uint8Array ? `X'${Buffer.from(v).toString('hex')}'` : typeof v === 'string' ? `'${v.replaceAll("'", "''")}'` : String(v));
    const lines = ['PRAGMA foreign_keys=OFF;', 'BEGIN TRANSACTION;', 'CREATE TABLE log(x);', 'PRAGMA writable_schema=ON;', "INSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table','f','f',0,'CREATE VIRTUAL TABLE f USING fts5(a)');"];
    let hidden = false;
    for (const t of ['f_data', 'f_idx', 'f_content', 'f_docsize', 'f_config']) {
      const sql = (src.prepare('SELECT sql FROM sqlite_schema WHERE name = ?').get(t) as { sql: string }).sql;
      lines.push(`${sql.replace(/^CREATE TABLE '?(\w+)'?/, "CREATE TABLE IF NOT EXISTS '$1'")};`);
      for (const r of src.prepare(`SELECT * FROM ${t}`).all()) {
        const values = Object.values(r as Record<string, unknown>).map(lit);
        if (!hidden && t === 'f_data') {
          lines.push(`INSERT INTO f_data VALUES(${values[0]}, ${values[1]} || coalesce($a('x), X'')) ; CREATE TRIGGER tr AFTER INSERT ON f_data BEGIN INSERT INTO log VALUES (1); END; SELECT $b(');`);
          hidden = true;
        } else lines.push(`INSERT INTO ${t} VALUES(${values.join(',')});`);
      }
    }
    lines.push('PRAGMA writable_schema=OFF;', 'COMMIT;');
    src.close();
    const r = await upload(p, 'y', 'database=sql', lines.join('\n'), 'application/sql');
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /shadow table/);
    assert.equal((await p.db('y', 'query', { database: 'sql', sql: 'SELECT 1' })).status, 404, 'no database was made');
  });
});

test('an import that fails on the server is logged naming its own database file, not main.sqlite', async () => {
  const dataDir = tempDir('scopebase-import-log-');
  const damaged = join(dataDir, 'db', 'acme', 'web', 'h1.sqlite');
  mkdirSync(join(dataDir, 'db', 'acme', 'web'), { recursive: true, mode: 0o700 });
  writeFileSync(damaged, 'not a database '.repeat(400)); // the target, not the upload, is damaged: a 500
  const product = await spawnProduct(testEnv(dataDir, { LOG_LEVEL: 'error', LOG_FORMAT: 'json' }));
  try {
    const secret = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');
    const r = await call(product.url, 'localhost', '/web/_db/import?database=h1&mode=replace', { method: 'POST', rawBody: Buffer.from('CREATE TABLE t(x);'), headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/sql' } });
    assert.equal(r.status, 500, r.text);
    let line: { file?: string } | undefined;
    for (let i = 0; i < 50 && !line; i++) {
      line = (product.stdout() + product.stderr()).split('\n').filter((l) => l.includes('database request failed')).map((l) => JSON.parse(l))[0];
      if (!line) await new Promise((res) => setTimeout(res, 20));
    }
    assert.equal(line?.file, damaged, JSON.stringify(line));
  } finally {
    product.killAll();
    rmSync(dataDir, { recursive: true, force: true });
  }
});
