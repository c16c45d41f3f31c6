// Import (SPEC 4.12) through the proxy: a SQLite file or SQL text becomes the database's content as one new
// version, all or nothing; every malformed, unsafe, oversized or interrupted upload changes nothing.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { rowsOf, sampleFile, SQLITE, upload } from './helpers/imports.ts';
import { executorPids, openFiles } from './helpers/processes.ts';
import { receiveBody } from '../src/db/import.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

describe('import', () => {
  let p: Product;
  let dir: string;
  before(async () => {
    p = await startProduct({ DB_MAX_SIZE_BYTES: String(1024 * 1024) });
    dir = tempDir('scopebase-import-');
  });
  after(async () => {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a SQLite file becomes a new database at version 1 holding exactly its content; replace makes one new version', async () => {
    const file = sampleFile(dir);
    const r = await upload(p, 'imp', 'database=copy&mode=create', file.bytes);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.database, 'copy');
    assert.equal(r.json.version, 1);
    assert.deepEqual(r.json.tables.find((t: { name: string }) => t.name === 'todo'), { name: 'todo', rows: 2 });
    const named = r.json.tables.map((t: { name: string }) => t.name);
    assert.ok(named.includes('docs') && !named.some((n: string) => n.startsWith('docs_')), `a full-text index by its own name, not its shadow tables: ${named}`);
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT id, title, big, data, ratio FROM todo ORDER BY id', 'copy'), [
      [1, 'one', { $bigint: '-9223372036854775808' }, { $blob: 'AP8K' }, 0.1],
      [2, 'it\'s "two"', { $bigint: '9223372036854775807' }, null, 1e300],
    ]);
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT rowid, a, b FROM nokey ORDER BY rowid', 'copy'), [[2, 'trigger', 2], [3, null, 'x'], [4, 3.5, { $blob: 'AQ==' }]], 'rowids are kept');
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT * FROM pair ORDER BY a, b', 'copy'), [[1, 'a', 'ä'], [1, 'b', null]]);
    assert.deepEqual(await rowsOf(p, 'imp', "SELECT rowid FROM docs WHERE docs MATCH 'fox'", 'copy'), [[1]], 'the full-text index came along');
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT title FROM titles ORDER BY 1', 'copy'), [['it\'s "two"'], ['one']]);
    // AUTOINCREMENT's counter and the trigger came along: the next id is 3 and the trigger fires.
    const w = await p.db('imp', 'execute', { database: 'copy', sql: "INSERT INTO todo(title) VALUES ('three') RETURNING id" });
    assert.deepEqual(w.json.results[0].rows, [[3]]);
    assert.equal(w.json.version, 2);
    assert.deepEqual(await rowsOf(p, 'imp', "SELECT count(*) FROM nokey WHERE a = 'trigger'", 'copy'), [[2]]);

    const again = await upload(p, 'imp', 'database=copy&mode=create', file.bytes);
    assert.equal(again.status, 400);
    assert.match(again.json.error.message, /exists: import with mode=replace/);

    const other = openSqlite(join(dir, 'other.sqlite'));
    other.exec("CREATE TABLE only(x); INSERT INTO only VALUES ('replaced')");
    other.close();
    const replaced = await upload(p, 'imp', 'database=copy&mode=replace', readFileSync(join(dir, 'other.sqlite')));
    assert.equal(replaced.status, 200, replaced.text);
    assert.equal(replaced.json.version, 3);
    assert.deepEqual(replaced.json.tables, [{ name: 'only', rows: 1 }]);
    const names = await rowsOf(p, 'imp', "SELECT name FROM sqlite_schema WHERE name NOT LIKE 'sqlite%' AND name NOT LIKE '\\_scopebase\\_%' ESCAPE '\\' ORDER BY name", 'copy');
    assert.deepEqual(names, [['only']], 'nothing of the old content remains');
    const changes = await p.db('imp', 'changes', { database: 'copy', since: 2 });
    assert.equal(changes.json.events.length, 1);
    assert.deepEqual({ type: changes.json.events[0].type, operation: changes.json.events[0].operation, changeset: changes.json.events[0].changeset, version: changes.json.events[0].version },
      { type: 'database.imported', operation: 'import', changeset: null, version: 3 });
    assert.deepEqual(changes.json.events[0].changes.tables, [...named, 'only'].sort(), 'the tables it changed: those it replaced and those it brought');
  });

  test('the file\'s PRAGMA user_version comes with it (a repo cannot set it any other way); a UTF-16 file is refused saying what to do', async () => {
    const path = join(dir, 'versioned.sqlite');
    const f = openSqlite(path);
    f.exec("PRAGMA journal_mode=DELETE; PRAGMA user_version = 42; CREATE TABLE t(x); INSERT INTO t VALUES ('é')");
    f.close();
    const r = await upload(p, 'imp', 'database=versioned', readFileSync(path));
    assert.equal(r.status, 200, r.text);
    assert.deepEqual((await p.db('imp', 'query', { database: 'versioned', sql: 'PRAGMA user_version' })).json.results[0].rows, [[42]]);
    const utf16 = join(dir, 'utf16.sqlite');
    const u = openSqlite(utf16);
    u.exec("PRAGMA encoding = 'UTF-16le'; PRAGMA journal_mode=DELETE; CREATE TABLE t(x); INSERT INTO t VALUES ('é')");
    u.close();
    const refused = await upload(p, 'imp', 'database=utf16', readFileSync(utf16));
    assert.equal(refused.status, 400, refused.text);
    assert.match(refused.json.error.message, /stores text as UTF-16le.*import its SQL text instead/);
  });

  test('SQL text, as sqlite3 .dump writes it, imports the same content', async () => {
    const dump = `PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE parent(id INTEGER PRIMARY KEY, name TEXT);
INSERT INTO parent VALUES(1,'a; not the end');
INSERT INTO parent VALUES(2,replace('b\\nc','\\n',char(10)));
CREATE TABLE child(id INTEGER PRIMARY KEY AUTOINCREMENT, parent INTEGER REFERENCES parent(id), data BLOB);
INSERT INTO child VALUES(5,1,X'cafe');
DELETE FROM sqlite_sequence;
INSERT INTO sqlite_sequence VALUES('child',5);
CREATE INDEX child_parent ON child(parent);
CREATE TRIGGER t AFTER DELETE ON parent BEGIN DELETE FROM child WHERE parent = old.id; END;
COMMIT;
`;
    const r = await upload(p, 'imp', 'database=fromsql', dump, 'application/sql');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.version, 1);
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT * FROM parent ORDER BY id', 'fromsql'), [[1, 'a; not the end'], [2, 'b\nc']]);
    assert.deepEqual(await rowsOf(p, 'imp', 'SELECT * FROM child', 'fromsql'), [[5, 1, { $blob: 'yv4=' }]]);
    const next = await p.db('imp', 'execute', { database: 'fromsql', sql: 'INSERT INTO child(parent) VALUES (2) RETURNING id' });
    assert.deepEqual(next.json.results[0].rows, [[6]]);
  });

  test('refused, and nothing changes: bad files, unsafe schemas and SQL, size, request shapes', async () => {
    const base = await upload(p, 'bad', 'database=keep', sampleFile(dir).bytes);
    assert.equal(base.status, 200, base.text);
    const before = JSON.stringify(await rowsOf(p, 'bad', 'SELECT * FROM todo ORDER BY id', 'keep'));
    const good = sampleFile(dir).bytes;
    const cases: [string, string, Buffer | string, string, number, RegExp][] = [
      ['garbage', 'database=keep&mode=replace', Buffer.from('this is not a database file at all, just text'.repeat(100)), SQLITE, 400, /not a usable SQLite database/],
      ['truncated', 'database=keep&mode=replace', good.subarray(0, Math.floor(good.length / 2)), SQLITE, 400, /SQLite|integrity/],
      ['internal table', 'database=keep&mode=replace', sampleFile(dir, 'CREATE TABLE _scopebase_meta(key, value);').bytes, SQLITE, 400, /reserved/],
      ['trigger on internals', 'database=keep&mode=replace', sampleFile(dir, "CREATE TRIGGER sneaky AFTER INSERT ON kv BEGIN DELETE FROM _scopebase_changes; END;").bytes, SQLITE, 400, /internal table/],
      ['unsafe virtual table', 'database=keep&mode=replace', sampleFile(dir, "CREATE VIRTUAL TABLE vocab USING fts5vocab('docs', 'row');").bytes, SQLITE, 400, /fts5vocab/],
      ['sql ATTACH', 'database=keep&mode=replace', "CREATE TABLE a(x);\nATTACH DATABASE '/tmp/x.db' AS x;", 'application/sql', 400, /statement 1/],
      ['sql internal write', 'database=keep&mode=replace', "INSERT INTO _scopebase_meta VALUES ('version', 99);", 'application/sql', 400, /internal/],
      ['sql view on internals', 'database=keep&mode=replace', 'CREATE TABLE ok(a);\nCREATE VIEW vv AS SELECT * FROM _scopebase_changes;', 'application/sql', 400, /view vv refers to an internal table/],
      ['fts5 content from internals', 'database=keep&mode=replace', sampleFile(dir, "CREATE VIRTUAL TABLE f USING fts5(event, content='_scopebase_changes');").bytes, SQLITE, 400, /table f refers to an internal table/],
      ['sql error', 'database=keep&mode=replace', 'CREATE TABLE a(x);\nINSERT INTO nowhere VALUES (1);', 'application/sql', 400, /statement 1.*no such table/],
      ['sql schema write', 'database=keep&mode=replace', "CREATE TABLE a(x);\nPRAGMA writable_schema=ON;\nUPDATE sqlite_schema SET sql = 'CREATE TABLE a(y)' WHERE name = 'a';", 'application/sql', 400, /statement 2 of the SQL text: sqlite_schema may not be modified by SQL/],
      ['sql broken reference', 'database=keep&mode=replace', 'CREATE TABLE c(p REFERENCES p(id));\nCREATE TABLE p(id INTEGER PRIMARY KEY);\nINSERT INTO c VALUES (7);\nINSERT INTO p VALUES (1);', 'application/sql', 409, /FOREIGN KEY constraint failed: a row of c refers to a missing row of p/],
      ['too big', 'database=keep&mode=replace', Buffer.alloc(2 * 1024 * 1024, 1), SQLITE, 507, /DB_MAX_SIZE_BYTES/],
      ['sql too big once loaded', 'database=keep&mode=replace', `CREATE TABLE big(x);\n${"INSERT INTO big VALUES (randomblob(200000));\n".repeat(8)}`, 'application/sql', 507, /.+/],
      ['content type', 'database=keep&mode=replace', good, 'application/octet-stream', 400, /Content-Type/],
      ['mode', 'database=keep&mode=merge', good, SQLITE, 400, /mode must be/],
      ['parameter', 'database=keep&mode=replace&force=1', good, SQLITE, 400, /unknown query parameter/],
      ['twice', 'database=keep&mode=replace&database=other', good, SQLITE, 400, /database is given more than once/],
      ['name', 'database=..%2Fx&mode=replace', good, SQLITE, 400, /database name/],
      ['empty', 'database=keep&mode=replace', Buffer.alloc(0), SQLITE, 400, /empty/],
    ];
    for (const [what, query, body, type, status, message] of cases) {
      const r = await upload(p, 'bad', query, body, type);
      assert.equal(r.status, status, `${what}: ${r.text}`);
      assert.match(r.json.error.message, message, what);
    }
    const wrong = await upload(p, 'bad', 'database=keep&mode=replace', good, SQLITE, 'not-the-secret');
    assert.equal(wrong.status, 401);
    assert.equal(JSON.stringify(await rowsOf(p, 'bad', 'SELECT * FROM todo ORDER BY id', 'keep')), before);
    assert.equal((await p.db('bad', 'status', { database: 'keep' })).json.version, 1, 'no refused import made a version');
    const created = await upload(p, 'bad', 'database=fresh', Buffer.from('garbage'.repeat(200)));
    assert.equal(created.status, 400);
    assert.equal((await p.db('bad', 'status', { database: 'fresh' })).json.exists, false, 'a refused create leaves no database');
    assert.deepEqual(readdirSync(join(p.dataDir, 'tmp')), [], 'no upload is left behind');
    const held = executorPids().flatMap(openFiles).filter((f) => f.startsWith(join(p.dataDir, 'tmp')));
    assert.deepEqual(held, [], 'no refused upload is left open in an executor');
  });

  test('kill -9 of every executor during an import: the database is as before or fully imported, never in between', async () => {
    const path = join(dir, 'big.sqlite');
    const big = openSqlite(path);
    big.exec('CREATE TABLE big(id INTEGER PRIMARY KEY, pad); WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 60000) INSERT INTO big SELECT n, randomblob(8) FROM c');
    big.close();
    const bytes = readFileSync(path);
    const made = await p.db('kill', 'execute', { statements: [{ sql: 'CREATE TABLE big(id INTEGER PRIMARY KEY, pad)' }, { sql: 'INSERT INTO big VALUES (1, 0)' }] });
    const outcomes = new Set<string>();
    for (const delay of [30, 60, 120]) {
      let status = await p.db('kill', 'status', {});
      for (let i = 0; i < 20 && status.status >= 500; i++) {
        await new Promise((res) => setTimeout(res, 100));
        status = await p.db('kill', 'status', {});
      }
      const before = status.json.version;
      const pending = upload(p, 'kill', 'mode=replace', bytes);
      await new Promise((r) => setTimeout(r, delay));
      for (const pid of executorPids()) {
        try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
      }
      await pending;
      // Every process was killed at once: reads may meet several that are dying before fresh ones take over.
      let r = await p.db('kill', 'query', { sql: 'SELECT count(*) FROM big' });
      for (let i = 0; i < 20 && r.status >= 500; i++) {
        await new Promise((res) => setTimeout(res, 100));
        r = await p.db('kill', 'query', { sql: 'SELECT count(*) FROM big' });
      }
      assert.equal(r.status, 200, r.text);
      const rows = r.json.results[0].rows[0][0];
      if (rows === 60000) {
        assert.equal(r.json.version, before + 1);
        outcomes.add('imported');
      } else {
        assert.equal(rows, 1, `in between: ${rows} rows`);
        assert.equal(r.json.version, before);
        outcomes.add('not imported');
      }
      assert.deepEqual((await p.db('kill', 'query', { sql: 'PRAGMA integrity_check' })).json.results[0].rows, [['ok']]);
      if (rows === 60000) await p.db('kill', 'execute', { statements: [{ sql: 'DELETE FROM big' }, { sql: 'INSERT INTO big VALUES (1, 0)' }] });
    }
    assert.ok(made.status === 200 && outcomes.size > 0);
  });

  test('an upload cut off midway changes nothing and leaves no file', async () => {
    const file = sampleFile(dir).bytes;
    const { port } = new URL(p.url);
    await new Promise<void>((resolve) => {
      const s = connect(Number(port), '127.0.0.1', () => {
        s.write(`POST /web/_db/import?database=cut HTTP/1.1\r\nHost: acme.${p.config.baseDomain}\r\nAuthorization: Bearer ${p.secret('acme', 'web')}\r\nContent-Type: ${SQLITE}\r\nContent-Length: ${file.length}\r\n\r\n`);
        s.write(file.subarray(0, 1000), () => setTimeout(() => s.destroy(), 100));
      });
      s.on('close', () => resolve());
      s.on('error', () => {});
    });
    await new Promise((r) => setTimeout(r, 200));
    assert.equal((await p.db('web', 'status', { database: 'cut' })).json.exists, false);
    assert.deepEqual(readdirSync(join(p.dataDir, 'tmp')), []);
    writeFileSync(join(dir, 'unused'), '');
  });

  test('an import whose executor is killed while loading SQL text leaves no file in DATA_DIR/tmp', async () => {
    // A text that runs long (past DB_QUERY_TIMEOUT_MS its process is killed): killed here, and again on its rerun.
    const slow = 'CREATE TABLE t(x);\nINSERT INTO t VALUES (1);\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) SELECT count(*) FROM c;\n';
    const tmp = join(p.dataDir, 'tmp');
    let answered = false;
    const res = upload(p, 'web', 'database=killed', slow, 'application/sql').finally(() => (answered = true));
    const started = Date.now();
    while (!answered && Date.now() - started < 10_000) {
      await new Promise((r) => setTimeout(r, 100));
      if (readdirSync(tmp).some((f) => f.startsWith('upload-'))) for (const pid of executorPids()) process.kill(pid, 'SIGKILL');
    }
    assert.notEqual((await res).status, 200);
    assert.deepEqual(readdirSync(tmp), []);
  });

  test('a runaway statement in SQL text is stopped at DB_QUERY_TIMEOUT_MS like any statement: 422, and no database is left', async () => {
    const q = await startProduct({ DB_QUERY_TIMEOUT_MS: '300' });
    try {
      const runaway = 'CREATE TABLE t(a);\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;\n';
      const started = Date.now();
      const r = await upload(q, 'web', 'database=runaway', runaway, 'application/sql');
      assert.equal(r.status, 422, r.text);
      assert.equal(r.json.error.code, 'query_timeout');
      assert.ok(Date.now() - started < 8000, `stopped after ${Date.now() - started} ms, not after the import's 600 s`);
      assert.equal((await q.db('web', 'status', { database: 'runaway' })).json.exists, false, 'all or nothing: no empty database');
      // So with any first write stopped at its limit: the database it was creating is not left behind, empty.
      const first = await q.db('web', 'execute', { database: 'runaway2', sql: 'CREATE TABLE x AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) AS n FROM c' });
      assert.equal(first.status, 422, first.text);
      assert.equal((await q.db('web', 'status', { database: 'runaway2' })).json.exists, false, 'a first write stopped at its limit leaves no database');
      // A slow but legitimate text, many statements each far under the limit, is not cut by the sum of their times
      // while that sum fits the import's budget (it grows with the text: 8 MiB of it give 8 s more, db-import-budget.test.ts).
      const steps = Array.from({ length: 100 }, (_, i) => `INSERT INTO t SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT ${50_000 + i}) SELECT x FROM c);`);
      const text = `CREATE TABLE t(n);\n${steps.join('\n')}\n-- ${'x'.repeat(8 << 20)}\n`;
      let t0 = Date.now();
      let ok = await upload(q, 'web', 'database=slow', text, 'application/sql');
      // One statement alone past 300 ms (a loaded machine: its premise, each far under the limit, failed) is sent again.
      for (let i = 1; i < 3 && /^the statement ran past/.test(ok.json?.error?.message ?? ''); i++) {
        t0 = Date.now();
        ok = await upload(q, 'web', 'database=slow', text, 'application/sql');
      }
      assert.equal(ok.status, 200, ok.text);
      assert.ok(Date.now() - t0 > 300, `premise: the text ran past one statement's limit in all (${Date.now() - t0} ms)`);
    } finally {
      await q.close();
    }
  });

  test('an upload whose connection closed before its body was read fails at once and leaves no file', async () => {
    const tmp = tempDir();
    const body = new PassThrough();
    body.write('part of a file');
    body.destroy(); // the reset came while the request waited, before receiveBody listened for it
    await new Promise((r) => setImmediate(r));
    const outcome = await Promise.race([
      receiveBody(body, tmp, 1 << 20).then(() => 'received', (e: Error) => e.message),
      new Promise((r) => setTimeout(() => r('still waiting'), 2000)),
    ]);
    assert.match(String(outcome), /the upload ended before its end/);
    assert.deepEqual(readdirSync(tmp), []);
    rmSync(tmp, { recursive: true, force: true });
  });
});
