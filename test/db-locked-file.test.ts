// A database file locked by another process (a `sqlite3` shell or a backup tool in exclusive mode): a request that
// cannot get the lock is 503 unavailable with Retry-After and `committed: false` (SPEC 3), within the statement
// limit, not 422 query_timeout after it though nothing ran. Real product, real files, over HTTP.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startProduct, type HttpResult, type Product } from './helpers/product.ts';
import { executorPids, openFiles } from './helpers/processes.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const TIMEOUT_MS = 2000;
let p: Product;

before(async () => {
  // Connections idle for 50 ms are closed: the next request opens the file again, as it does after a quiet minute.
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: String(TIMEOUT_MS), DB_IDLE_CLOSE_MS: '50' });
  const r = await p.db('web', 'execute', { sql: 'CREATE TABLE t(v)' });
  assert.equal(r.status, 200, r.text);
});
after(() => p.close());

function assertLocked(r: HttpResult, ms: number): void {
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error.code, 'unavailable');
  assert.match(r.json.error.message, /locked by another connection or process \(SQLITE_BUSY\): nothing of this request ran/);
  assert.equal(r.json.error.details.committed, false);
  assert.equal(r.json.error.details.sqliteCode, 'SQLITE_BUSY');
  assert.equal(r.headers['retry-after'], '1', 'a 503 says when to retry');
  assert.ok(ms < TIMEOUT_MS, `answered within the statement limit (${Math.round(ms)} ms)`);
}

test('a write or read blocked by an exclusive lock held elsewhere is 503 with Retry-After, not 422; it goes through once the lock is gone', async () => {
  const file = join(p.dataDir, 'db/acme/web/main.sqlite');
  // The executors' connections close (DB_IDLE_CLOSE_MS): a connection open in WAL mode holds no lock between requests.
  const held = () => executorPids().some((pid) => openFiles(pid).includes(file));
  for (let i = 0; i < 200 && held(); i++) await new Promise((r) => setTimeout(r, 25));
  assert.equal(held(), false, 'no executor holds the file open');
  const other = openSqlite(file, { timeout: 0 });
  try {
    // Exclusive mode keeps the lock a write takes until the connection closes.
    other.exec("PRAGMA locking_mode=EXCLUSIVE; BEGIN IMMEDIATE; INSERT INTO t VALUES ('theirs'); COMMIT");
    let started = performance.now();
    const write = await p.db('web', 'execute', { sql: "INSERT INTO t VALUES ('ours')" });
    assertLocked(write, performance.now() - started);
    started = performance.now();
    const read = await p.db('web', 'query', { sql: 'SELECT v FROM t' });
    assertLocked(read, performance.now() - started);
  } finally {
    other.close();
  }
  const retried = await p.db('web', 'execute', { sql: "INSERT INTO t VALUES ('ours')" });
  assert.equal(retried.status, 200, retried.text);
  assert.equal(retried.json.version, 2, 'the refused write left nothing: its retry is the next version');
  const rows = await p.db('web', 'query', { sql: 'SELECT v FROM t ORDER BY rowid' });
  assert.deepEqual(rows.json.results[0].rows, [['theirs'], ['ours']]);
});
