// Faults of the disk under the product (issue 16): a damaged database file and a full disk, on real files and a real
// small filesystem. What must hold: that scope answers a clear error (never a crash, never "the executor stopped"),
// every other scope serves on, and nothing is corrupt once space returns.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, openSync, rmSync, statSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startProduct, tempDir } from './helpers/product.ts';
import { signIn } from './helpers/session.ts';

/** Writes `file` until the disk refuses 4 KiB more. */
function takeEveryByte(file: string): void {
  const fd = openSync(file, 'w');
  try { for (;;) writeSync(fd, Buffer.alloc(4096)); } catch { /* ENOSPC */ } finally { closeSync(fd); }
}

test('a damaged database file: that database answers 500 naming the damage, on every operation; the others serve on', async () => {
  const dir = tempDir('scopebase-damaged-');
  const first = await startProduct({ DATA_DIR: dir });
  for (const database of ['bad', 'good']) {
    const r = await first.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (1)' }] });
    assert.equal(r.status, 200, r.text);
  }
  await first.close();
  // Its first page overwritten, its WAL gone: SQLite no longer recognises the file.
  const file = join(dir, 'db', 'acme', 'web', 'bad.sqlite');
  const fd = openSync(file, 'r+');
  writeSync(fd, Buffer.alloc(100, 'garbage '), 0, 100, 0);
  closeSync(fd);
  rmSync(`${file}-wal`, { force: true });
  const p = await startProduct({ DATA_DIR: dir });
  try {
    for (const [op, body] of [['query', { sql: 'SELECT * FROM t' }], ['execute', { sql: 'INSERT INTO t VALUES (2)' }], ['status', {}], ['migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE u(x)' }] }], ['export', {}]] as const) {
      const r = await p.db('web', op, { database: 'bad', ...body });
      assert.equal(r.status, 500, `${op}: ${r.text}`);
      assert.equal(r.json.error.code, 'internal');
      assert.match(r.json.error.message, /the database file is damaged \(SQLITE_NOTADB: file is not a database\)/, op);
      assert.ok(!r.text.includes(dir), 'no server path in the reply');
    }
    const good = await p.db('web', 'execute', { database: 'good', sql: 'INSERT INTO t VALUES (2)' });
    assert.equal(good.status, 200, good.text);
    assert.equal((await p.db('web', 'query', { database: 'good', sql: 'SELECT count(*) FROM t' })).json.results[0].rows[0][0], 2);
  } finally {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a full disk (a real 8 MiB tmpfs): writes get 507 or 503, never 500, in the database and the account service; reads go on; after space returns, writes resume and nothing is corrupt', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('mounting a tmpfs needs root (CI runs as root)');
  const dir = tempDir('scopebase-full-');
  mkdirSync(dir, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=8m', 'tmpfs', dir]);
  let p;
  try {
    // Idle connections close after 200 ms: a database not in use has no connection, and must be opened to be read.
    // Sessions renewed at most every 6 s (a tenth of the TTL): the one below is due for renewal while the disk is full.
    p = await startProduct({ DATA_DIR: dir, DB_HISTORY_DAYS: '1', DB_IDLE_CLOSE_MS: '200', ACCOUNT_SESSION_TTL: '1m' });
    const cookie = await signIn(p, 'acme', 'filler');
    const signedInAt = performance.now();
    assert.equal((await p.db('web', 'execute', { database: 'idle', statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (42)' }] })).status, 200);
    assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE big(id INTEGER PRIMARY KEY, pad BLOB)' })).status, 200);
    await new Promise((r) => setTimeout(r, 600)); // past DB_IDLE_CLOSE_MS: the idle database's connection is closed
    writeFileSync(join(dir, 'ballast'), Buffer.alloc(2 << 20)); // given back later, as an operator frees space
    writeFileSync(join(dir, 'reserve'), Buffer.alloc(256 << 10)); // given back while full, for one more database
    const statuses = new Map<number, number>();
    let refused = null;
    for (let i = 0; i < 200 && !refused; i++) {
      const r = await p.db('web', 'execute', { sql: 'INSERT INTO big(pad) VALUES (randomblob(100000))' });
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      if (r.status !== 200) refused = r;
    }
    assert.ok(refused, `the disk filled up: ${JSON.stringify([...statuses])}`);
    assert.ok(refused.status === 507 || refused.status === 503, `a full disk is 507 or 503, not ${refused.status}: ${refused.text}`);
    // A database not opened yet, and the account service's own store, answer the same: 507, not a 500.
    const fresh = await p.db('web', 'execute', { database: 'fresh', sql: 'CREATE TABLE t(x)' });
    assert.ok(fresh.status === 507 || fresh.status === 503, `a new database on a full disk: ${fresh.status} ${fresh.text}`);
    if (fresh.status === 507) assert.match(fresh.json.error.message, /disk is full|size limit/);
    // So does a libSQL transaction's BEGIN on a database not made yet.
    const tx = await p.call('/web/_db/freshtx/v2/pipeline', { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'close' }] }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
    assert.equal(tx.json.results[0].type, 'error', `BEGIN on a new database on a full disk: ${tx.text}`);
    let put;
    for (let i = 0; i < 8 && (!put || put.status === 200); i++) { // each about 60 KB: the disk may have had a little left
      put = await p.call(`/web/_account/credentials/plug/key${i}`, { method: 'PUT', body: { value: { token: randomBytes(30_000).toString('hex') } }, headers: { cookie } });
    }
    assert.equal(put!.status, 507, `a credential write on a full disk: ${put!.text}`);
    assert.equal(put!.json.error.code, 'quota_exceeded');
    assert.match(put!.json.error.message, /disk is full/);
    await new Promise((r) => setTimeout(r, Math.max(0, signedInAt + 6500 - performance.now())));
    const verify = await p.call('/web/_account/verify', { headers: { cookie } });
    assert.equal(verify.status, 200, `sign-in checks go on, a session due for renewal too (the renewal waits): ${verify.text}`);
    const list = await p.call('/web/_account/credentials', { headers: { cookie } });
    assert.equal(list.status, 200, `so does a page read with the session: ${list.text}`);
    // A database whose WAL holds commits its file does not: written in the last free bytes, its connection closed
    // on the full disk (which refuses the checkpoint), and its shared-memory file gone (as when another writer takes
    // the bytes its truncation gives back). SQLite cannot make that file, and reads the WAL with its index in memory.
    rmSync(join(dir, 'reserve'));
    const walled = await p.db('web', 'execute', { database: 'walled', statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (7), (8)' }] });
    assert.equal(walled.status, 200, walled.text);
    takeEveryByte(join(dir, 'rest'));
    await new Promise((r) => setTimeout(r, 600)); // past DB_IDLE_CLOSE_MS
    const walledFile = join(dir, 'db', 'acme', 'web', 'walled.sqlite');
    assert.ok(statSync(`${walledFile}-wal`).size > 0, 'the full disk kept the WAL from its checkpoint');
    rmSync(`${walledFile}-shm`, { force: true });
    takeEveryByte(join(dir, 'rest2'));
    const inWal = await p.db('web', 'query', { database: 'walled', sql: 'SELECT x FROM t ORDER BY x' });
    assert.equal(inWal.status, 200, `a read of a database whose WAL holds its last commits, on a full disk: ${inWal.text}`);
    assert.deepEqual(inWal.json.results[0].rows, [[7], [8]]);
    assert.equal((await p.db('web', 'status', { database: 'walled' })).json.version, 1);
    // A database with no open connection and no WAL content: read from its file alone.
    const idle = await p.db('web', 'query', { database: 'idle', sql: 'SELECT x FROM t' });
    assert.equal(idle.status, 200, `a read of a database not open on a full disk: ${idle.text}`);
    assert.deepEqual(idle.json.results[0].rows, [[42]]);
    const count = await p.db('web', 'query', { sql: 'SELECT count(*) FROM big' });
    assert.equal(count.status, 200, `reads go on: ${count.text}`);
    const acknowledged = count.json.results[0].rows[0][0];
    rmSync(join(dir, 'ballast'));
    rmSync(join(dir, 'rest'));
    rmSync(join(dir, 'rest2'));
    const again = await p.db('web', 'execute', { sql: 'INSERT INTO big(pad) VALUES (randomblob(1000))' });
    assert.equal(again.status, 200, `writes resume once space returns: ${again.text}`);
    const after = await p.db('web', 'query', { statements: [{ sql: 'SELECT count(*) FROM big' }, { sql: 'PRAGMA integrity_check' }] });
    const never = await p.db('web', 'query', { database: 'fresh', sql: 'SELECT 1' });
    assert.equal(never.status, 404, `the database refused for the full disk was not left behind as an empty file: ${never.text}`);
    const neverTx = await p.db('web', 'status', { database: 'freshtx' });
    assert.equal(neverTx.json.exists, false, `nor the one a transaction's BEGIN was refused for: ${neverTx.text}`);
    assert.equal(after.json.results[0].rows[0][0], acknowledged + 1, 'every acknowledged row, and the new one');
    assert.deepEqual(after.json.results[1].rows, [['ok']]);
  } finally {
    await p?.close();
    execFileSync('umount', ['-l', dir]);
    rmSync(dir, { recursive: true, force: true });
  }
});
