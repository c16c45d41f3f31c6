// The delivery thread's change-log reader against database files written by the real product: it serves what
// /_db/changes serves, never an uncommitted write, follows a database made again under the same name, and the
// body it hands to the sender is the stored event byte for byte.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { ChangeLogFiles } from '../src/mirror/delivery/change-log.ts';
import { eventBody } from '../src/mirror/delivery/sender.ts';
import { ApiError } from '../src/shared/errors.ts';
import { startProduct, tempDir } from './helpers/product.ts';
import { scopeOf } from './helpers/mirror.ts';

const code = (e: unknown) => (e instanceof ApiError ? e.code : String(e));

test('reads what /_db/changes serves, from the file, committed writes only; gone past retention like /_db/changes', async (t) => {
  const p = await startProduct();
  const feed = new ChangeLogFiles(join(p.dataDir, 'db'));
  t.after(async () => {
    feed.close();
    await p.close();
  });
  await p.db('web', 'migrate', { migrations: [{ id: '0001', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' }] });
  for (let i = 0; i < 5; i++) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO t (v) VALUES (?)', params: [`row ${i}`] })).status, 200);

  const served = (await p.db('web', 'changes', { since: 0 })).json;
  const read = await feed.readChanges(scopeOf(), 0, 100);
  assert.equal(read.version, 6);
  assert.deepEqual(read.events, served.events);
  assert.deepEqual((await feed.readChanges(scopeOf(), 4, 1)).events.map((e) => e.version), [5]);
  assert.equal(await feed.currentVersion(scopeOf()), 6);
  const writer = new DatabaseSync(join(p.dataDir, 'db/acme/web/main.sqlite'), { timeout: 5000 });
  t.after(() => writer.close());
  const stored = (writer.prepare('SELECT event FROM _scopebase_changes WHERE version = 2').get() as { event: string }).event;
  assert.equal(eventBody(read.events[1]!), stored, 'the wire body is the stored text');

  // A transaction holding a new event and version, not committed: invisible until it commits.
  writer.exec('BEGIN IMMEDIATE');
  writer.prepare("UPDATE _scopebase_meta SET value = 7 WHERE key = 'version'").run();
  writer.prepare('INSERT INTO _scopebase_changes (version, committed_at, event) VALUES (7, ?, ?)').run(Date.now(), JSON.stringify({ ...read.events[5], id: 'evt_uncommitted', version: 7, previousVersion: 6 }));
  const during = await feed.readChanges(scopeOf(), 5, 100);
  assert.equal(during.version, 6);
  assert.deepEqual(during.events.map((e) => e.version), [6]);
  writer.exec('ROLLBACK');
  assert.equal((await feed.readChanges(scopeOf(), 6, 100)).events.length, 0);

  // Retention dropped 1..3 (as pruning would): both refuse since=2 with gone, and serve since=3.
  writer.exec('DELETE FROM _scopebase_changes WHERE version <= 3');
  assert.equal((await p.db('web', 'changes', { since: 2 })).status, 410);
  await assert.rejects(feed.readChanges(scopeOf(), 2, 100), (e) => code(e) === 'gone');
  assert.deepEqual((await feed.readChanges(scopeOf(), 3, 100)).events.map((e) => e.version), [4, 5, 6]);
  assert.deepEqual((await p.db('web', 'changes', { since: 3 })).json.events.map((e: { version: number }) => e.version), [4, 5, 6]);
});

test('a database deleted and made again under the same name is read anew; missing and half-made files', async (t) => {
  const dataDir = tempDir();
  const feed = new ChangeLogFiles(join(dataDir, 'db'));
  t.after(() => {
    feed.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const writes = async (n: number) => {
    const p = await startProduct({ DATA_DIR: dataDir });
    try {
      for (let i = 0; i < n; i++) await p.db('web', 'execute', { sql: i === 0 ? 'CREATE TABLE t (id INTEGER PRIMARY KEY)' : 'INSERT INTO t DEFAULT VALUES' });
    } finally {
      await p.close();
    }
  };
  await writes(4);
  assert.deepEqual((await feed.readChanges(scopeOf(), 0, 100)).events.map((e) => e.version), [1, 2, 3, 4]); // the reader stays open
  const remove = () => {
    for (const suffix of ['', '-wal', '-shm']) rmSync(join(dataDir, `db/acme/web/main.sqlite${suffix}`), { force: true });
  };
  remove();
  await writes(2);
  const again = await feed.readChanges(scopeOf(), 0, 100);
  assert.equal(again.version, 2);
  assert.deepEqual(again.events.map((e) => e.version), [1, 2]);
  remove();
  await assert.rejects(feed.readChanges(scopeOf(), 0, 100), (e) => code(e) === 'database_not_found');
  assert.equal(await feed.currentVersion(scopeOf()), null);
  // A file the executor has just created, before its internal tables: nothing to deliver yet, not an error.
  writeFileSync(join(dataDir, 'db/acme/web/fresh.sqlite'), '');
  assert.deepEqual(await feed.readChanges(scopeOf('fresh'), 0, 100), { events: [], version: 0 });
  assert.equal(await feed.currentVersion(scopeOf('fresh')), 0);
});

test('a read the full disk refuses leaves no connection behind: the database is not held locked for later readers', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('mounting a tmpfs needs root (CI runs as root)');
  const dir = tempDir('scopebase-full-feed-');
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir]);
  const feed = new ChangeLogFiles(join(dir, 'db'));
  t.after(() => {
    feed.close();
    execFileSync('umount', ['-l', dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  const file = join(dir, 'db/acme/web/main.sqlite');
  mkdirSync(dirname(file), { recursive: true });
  // Committed to the WAL by a process that is then killed (as an executor can be): the WAL keeps them, and the
  // shared-memory file, removed, must be made again by the next reader: on a full disk it cannot be.
  const writer = `const { DatabaseSync } = require('node:sqlite'); const db = new DatabaseSync(${JSON.stringify(file)});
    db.exec("PRAGMA journal_mode=WAL; CREATE TABLE _scopebase_meta(key TEXT PRIMARY KEY, value); CREATE TABLE _scopebase_changes(version INTEGER PRIMARY KEY, event TEXT); INSERT INTO _scopebase_meta VALUES ('version', 1)");
    process.kill(process.pid, 'SIGKILL');`;
  spawnSync(process.execPath, ['-e', writer]);
  assert.ok(statSync(`${file}-wal`).size > 0, 'the WAL holds the commits');
  rmSync(`${file}-shm`);
  const fd = openSync(join(dir, 'ballast'), 'w');
  try { for (;;) writeSync(fd, Buffer.alloc(4096)); } catch { /* ENOSPC: the disk is full */ } finally { closeSync(fd); }
  await assert.rejects(feed.readChanges(scopeOf(), 0, 10), /disk I\/O error/);
  // A reader that needs the database to itself (as the executors' read on a full disk does) gets it: the refused
  // read kept no lock.
  const alone = new DatabaseSync(file, { timeout: 0 });
  t.after(() => alone.close());
  alone.exec('PRAGMA locking_mode=EXCLUSIVE');
  assert.deepEqual({ ...alone.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() }, { value: 1 });
});
