// SPEC 4.10: how an interactive transaction of a libSQL stream ends, sent as raw Hrana JSON through the proxy —
// when SQLite itself rolls it back under a failing statement, and when its BEGIN, COMMIT or ROLLBACK carries comments.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
const pipeline = (baton: string | null, requests: unknown[], database: string) =>
  p.call(`/web/_db/${database}/v3/pipeline`, { body: { baton, requests }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
const exec = (sql: string) => ({ type: 'execute', stmt: { sql } });
const status = async (database: string) => (await p.db('web', 'status', { database })).json as { version: number };
const names = async (database: string) => (await p.db('web', 'query', { database, sql: 'SELECT group_concat(name) FROM (SELECT name FROM u ORDER BY id)' })).json.results[0].rows[0][0] as string;
const outcome = (r: { type: string; error?: { message: string }; response?: { type: string; is_autocommit?: boolean } }) =>
  r.type === 'error' ? `error: ${r.error!.message}` : r.response!.type === 'get_autocommit' ? `autocommit ${r.response!.is_autocommit}` : 'ok';

before(async () => {
  p = await startProduct();
});
after(() => p.close());

describe('a transaction SQLite rolls back itself under a failing statement is over on the stream too', () => {
  const cases = [
    ['INSERT OR ROLLBACK', "INSERT OR ROLLBACK INTO u(name) VALUES ('taken')", /UNIQUE constraint failed: u\.name/],
    ['RAISE(ROLLBACK) in a trigger', "INSERT INTO u(name) VALUES ('boom')", /no boom/],
  ] as const;
  for (const [what, sql, message] of cases) {
    test(`${what}: the stream is in autocommit again, as a connection is; nothing runs outside a version (statements after it committed on their own, unrecorded, and ROLLBACK kept them)`, async () => {
      const db = what.startsWith('INSERT') ? 'orrollback' : 'raiserollback';
      const made = await pipeline(null, [exec('CREATE TABLE u(id INTEGER PRIMARY KEY, name TEXT UNIQUE)'), exec("INSERT INTO u(name) VALUES ('taken')"),
        exec("CREATE TRIGGER no_boom BEFORE INSERT ON u WHEN new.name = 'boom' BEGIN SELECT RAISE(ROLLBACK, 'no boom'); END"), { type: 'close' }], db);
      assert.ok(made.json.results.every((r: { type: string }) => r.type === 'ok'), made.text);
      const start = (await status(db)).version;
      const open = await pipeline(null, [exec('BEGIN'), exec("INSERT INTO u(name) VALUES ('in the transaction')")], db);
      assert.deepEqual(open.json.results.map(outcome), ['ok', 'ok'], open.text);
      const r = await pipeline(open.json.baton, [
        exec(sql), { type: 'get_autocommit' },
        // @libsql/client (Hrana 3) guards each statement of a transaction so: skipped once the transaction is gone.
        { type: 'batch', batch: { steps: [{ stmt: { sql: "INSERT INTO u(name) VALUES ('guarded')" }, condition: { type: 'not', cond: { type: 'is_autocommit' } } }] } },
        exec("INSERT INTO u(name) VALUES ('after')"), exec('ROLLBACK'), exec('COMMIT'), { type: 'close' },
      ], db);
      const [failed, autocommit, guarded, later, rollback, commit] = r.json.results;
      assert.match(outcome(failed), message);
      assert.equal(outcome(autocommit), 'autocommit true', r.text);
      assert.deepEqual(guarded.response.result, { step_results: [null], step_errors: [null] }, 'the guarded step did not run');
      assert.equal(outcome(later), 'ok', 'a statement after it runs on its own, as on SQLite');
      assert.equal(outcome(rollback), 'error: cannot rollback - no transaction is active');
      assert.equal(outcome(commit), 'error: cannot commit - no transaction is active');
      assert.equal(await names(db), 'taken,after', 'nothing of the transaction stayed; the write after it stayed');
      assert.equal((await status(db)).version, start + 1, 'the write after it is a version of its own');
      const events = (await p.db('web', 'changes', { database: db, since: start })).json.events as { version: number }[];
      assert.deepEqual(events.map((e) => e.version), [start + 1], 'and it is in the change log (mirrors get it)');
      const t0 = performance.now();
      assert.equal((await p.db('web', 'execute', { database: db, sql: "INSERT INTO u(name) VALUES ('next')" })).status, 200);
      assert.ok(performance.now() - t0 < 500, 'the database\'s writes did not wait for the stream to expire');
    });
  }
});

describe('BEGIN, COMMIT, ROLLBACK and savepoints are read as SQLite reads them: comments before and after count for nothing', () => {
  test('ROLLBACK -- c, /* c */ COMMIT, a commented BEGIN and savepoints end or nest the transaction (they were refused as SQLITE_AUTH, and the transaction held the lane until it expired)', async () => {
    const db = 'comments';
    assert.equal((await pipeline(null, [exec('CREATE TABLE u(id INTEGER PRIMARY KEY, name TEXT)'), { type: 'close' }], db)).json.results[0].type, 'ok');
    for (const [begin, end, name] of [['BEGIN -- start', 'ROLLBACK -- undo', 'a'], ['/* tag */ BEGIN', 'ROLLBACK /* undo */;', 'b'], ['-- tx\nBEGIN IMMEDIATE;', '/* tag */ COMMIT', 'c'], ['BEGIN', 'COMMIT; -- done', 'd']] as const) {
      const r = await pipeline(null, [exec(begin), { type: 'get_autocommit' }, exec('SAVEPOINT s -- nested'), exec(`INSERT INTO u(name) VALUES ('${name} undone')`),
        exec('/* tag */ ROLLBACK TO s'), exec('RELEASE s; -- x'), exec(`INSERT INTO u(name) VALUES ('${name}')`)], db);
      assert.deepEqual(r.json.results.map(outcome), ['ok', 'autocommit false', 'ok', 'ok', 'ok', 'ok', 'ok'], `${begin}: ${r.text}`);
      // A read with a comment before it is a read: it does not wait behind the open transaction's lane.
      const t0 = performance.now();
      const read = await pipeline(null, [exec('/* tag */ SELECT count(*) FROM u'), { type: 'close' }], db);
      assert.equal(outcome(read.json.results[0]), 'ok', read.text);
      assert.ok(performance.now() - t0 < 500, `a commented read waited ${performance.now() - t0} ms behind the transaction`);
      const ended = await pipeline(r.json.baton, [exec(end), { type: 'get_autocommit' }, { type: 'close' }], db);
      assert.deepEqual(ended.json.results.map(outcome), ['ok', 'autocommit true', 'ok'], `${end}: ${ended.text}`);
    }
    assert.equal(await names(db), 'c,d', 'the rolled-back transactions left nothing, the committed ones their row, no savepoint\'s row');
  });
});

describe('PRAGMA foreign_keys on a stream is read with its comments too', () => {
  test('`PRAGMA foreign_keys=OFF; -- rebuild` turns keys off for the stream: a table rebuild keeps its children (it ran as a request of its own, keys stayed on, and DROP TABLE cascaded)', async () => {
    for (const [i, off] of ['PRAGMA foreign_keys=OFF; -- rebuild', '/* rebuild */ PRAGMA foreign_keys = OFF', "PRAGMA foreign_keys = 'off'"].entries()) {
      const db = `rebuild${i}`;
      const made = await pipeline(null, [exec('CREATE TABLE p(id INTEGER PRIMARY KEY)'), exec('CREATE TABLE c(id INTEGER PRIMARY KEY, pid INTEGER REFERENCES p(id) ON DELETE CASCADE)'),
        exec('INSERT INTO p VALUES (1)'), exec('INSERT INTO c VALUES (1, 1)'), { type: 'close' }], db);
      assert.ok(made.json.results.every((r: { type: string }) => r.type === 'ok'), made.text);
      const r = await pipeline(null, [exec(off), exec('BEGIN'), exec('CREATE TABLE p2(id INTEGER PRIMARY KEY, x)'), exec('INSERT INTO p2(id) SELECT id FROM p'),
        exec('DROP TABLE p'), exec('ALTER TABLE p2 RENAME TO p'), exec('COMMIT'), exec('PRAGMA foreign_keys=ON -- done'), { type: 'close' }], db);
      assert.ok(r.json.results.every((x: { type: string }) => x.type === 'ok'), `${off}: ${r.text}`);
      const children = await p.db('web', 'query', { database: db, sql: 'SELECT count(*) FROM c' });
      assert.deepEqual(children.json.results[0].rows, [[1]], `${off}: the child row stays`);
    }
  });
});

describe('reads go on while a transaction is open (SPEC 4.8: reads do not wait for writes)', () => {
  test('PRAGMA table_info(t), user_version and foreign_key_check are reads: they do not wait behind it (they waited DB_QUEUE_TIMEOUT_MS and got 503)', async () => {
    const db = 'pragmas';
    assert.equal((await pipeline(null, [exec('CREATE TABLE t(a)'), { type: 'close' }], db)).json.results[0].type, 'ok');
    const open = await pipeline(null, [exec('BEGIN'), exec('INSERT INTO t VALUES (1)')], db);
    for (const sql of ['PRAGMA table_info(t)', 'PRAGMA user_version', 'PRAGMA foreign_key_check', 'PRAGMA index_list(t) -- c']) {
      const t0 = performance.now();
      const r = await pipeline(null, [exec(sql), { type: 'close' }], db);
      assert.equal(outcome(r.json.results[0]), 'ok', `${sql}: ${r.text}`);
      assert.ok(performance.now() - t0 < 500, `${sql} waited ${performance.now() - t0} ms behind the transaction`);
    }
    const cols = await pipeline(null, [exec('PRAGMA table_info(t)'), { type: 'close' }], db);
    assert.equal(cols.json.results[0].response.result.rows[0][1].value, 'a');
    assert.equal(outcome((await pipeline(null, [exec('PRAGMA user_version = 3'), { type: 'close' }], 'pragmas2')).json.results[0]).startsWith('error: PRAGMA user_version = … is not allowed'), true, 'a pragma with a value is refused as before');
    assert.equal(outcome((await pipeline(open.json.baton, [exec('ROLLBACK'), { type: 'close' }], db)).json.results[0]), 'ok');
  });
});
