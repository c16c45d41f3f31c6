// The delivery thread's change feed against database files written by the real product. Both ways it reads a page —
// in the thread from the file (change-log.ts) and by the db service's executors (change-pages.ts, answered as
// threaded.ts does) — serve what /_db/changes serves, never an uncommitted write, `gone` past retention, and the body
// handed to the sender is the stored event byte for byte. The feed (feed.ts) reads in the thread unless that would
// parse a schema not known to be small, and reads a page two mirrors ask for in one turn once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, openSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Scope } from '../src/db/contract.ts';
import { createDbService } from '../src/db/service.ts';
import { ChangeLogFiles, IN_THREAD_SCHEMA_BYTES, NOT_HERE, type Page } from '../src/mirror/delivery/change-log.ts';
import { ChangeLogPages } from '../src/mirror/delivery/change-pages.ts';
import { DeliveryFeed } from '../src/mirror/delivery/feed.ts';
import { eventBody } from '../src/mirror/delivery/sender.ts';
import { readPage } from '../src/mirror/delivery/threaded.ts';
import { ApiError } from '../src/shared/errors.ts';
import { createLogger } from '../src/shared/log.ts';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { scopeOf } from './helpers/mirror.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const code = (e: unknown) => (e instanceof ApiError ? e.code : String(e));
type Row = { version: number };

/** Executor reads as the product has them: a db service of the test's own on the product's files, answered as threaded.ts does. */
async function executorPages(p: Product, t: { after(fn: () => unknown): void }): Promise<ChangeLogPages> {
  const db = await createDbService({ config: p.config, logger: createLogger('silent') });
  const pages: ChangeLogPages = new ChangeLogPages((request) => void readPage((scope, since, limit) => db.readChangePage(scope, since, limit), request).then(([answer]) => pages.answer(answer)));
  t.after(async () => {
    pages.close();
    await db.close();
  });
  return pages;
}

/** A read in the thread that must not be refused (a small file). */
function inThread(files: ChangeLogFiles, scope: Scope, since: number, limit: number): Page {
  const page = files.read(scope, since, limit);
  assert.notEqual(page, NOT_HERE);
  return page as Page;
}

test('in the thread and by executors: what /_db/changes serves, committed writes only, the stored bytes; gone past retention', async (t) => {
  const p = await startProduct();
  t.after(() => p.close());
  const pages = await executorPages(p, t);
  const files = new ChangeLogFiles(join(p.dataDir, 'db'));
  t.after(() => files.close());
  await p.db('web', 'migrate', { migrations: [{ id: '0001', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' }] });
  for (let i = 0; i < 5; i++) assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO t (v) VALUES (?)', params: [`row ${i}`] })).status, 200);
  const writer = openSqlite(join(p.dataDir, 'db/acme/web/main.sqlite'), { timeout: 5000 });
  t.after(() => writer.close());
  const served = (await p.db('web', 'changes', { since: 0 })).json;

  const readers: [string, (since: number, limit: number) => Promise<Page>][] = [
    ['in the thread', async (since, limit) => inThread(files, scopeOf(), since, limit)],
    ['by an executor', async (since, limit) => {
      const { events, version, schema } = await pages.read(scopeOf(), since, limit);
      assert.ok(schema.bytes > 0 && schema.cookie > 0, 'the executor says how large the schema is');
      return { events, version };
    }],
  ];
  for (const [how, read] of readers) {
    const all = await read(0, 100);
    assert.equal(all.version, 6, how);
    assert.deepEqual(all.events, served.events, how);
    assert.deepEqual((await read(4, 1)).events.map((e) => e.version), [5], how);
    for (const version of [1, 2, 6]) {
      const stored = (writer.prepare('SELECT event FROM _scopebase_changes WHERE version = ?').get(version) as { event: string }).event;
      assert.equal(eventBody(all.events[version - 1]!), stored, `${how}: the wire body is the stored text`);
    }
    // A transaction holding a new event and version, not committed: invisible.
    writer.exec('BEGIN IMMEDIATE');
    writer.prepare("UPDATE _scopebase_meta SET value = 7 WHERE key = 'version'").run();
    writer.prepare('INSERT INTO _scopebase_changes (version, committed_at, event) VALUES (7, ?, ?)').run(Date.now(), JSON.stringify({ ...all.events[5], id: 'evt_uncommitted', version: 7, previousVersion: 6 }));
    const during = await read(5, 100);
    writer.exec('ROLLBACK');
    assert.equal(during.version, 6, how);
    assert.deepEqual(during.events.map((e) => e.version), [6], how);
  }
  assert.equal(files.version(scopeOf()), 6);

  // Retention dropped 1..3 (as pruning would): all refuse since=2 with gone, and serve since=3.
  writer.exec('DELETE FROM _scopebase_changes WHERE version <= 3');
  assert.equal((await p.db('web', 'changes', { since: 2 })).status, 410);
  assert.deepEqual((await p.db('web', 'changes', { since: 3 })).json.events.map((e: Row) => e.version), [4, 5, 6]);
  for (const [how, read] of readers) {
    await assert.rejects(read(2, 100), (e) => code(e) === 'gone', how);
    assert.deepEqual((await read(3, 100)).events.map((e) => e.version), [4, 5, 6], how);
  }
  // No such database: not found.
  assert.throws(() => files.read(scopeOf('nothing'), 0, 100), (e) => code(e) === 'database_not_found');
  assert.equal(files.version(scopeOf('nothing')), null);
  await assert.rejects(pages.read(scopeOf('nothing'), 0, 100), (e) => code(e) === 'database_not_found');
  // Closing fails what still waits, at once.
  const pending = pages.read(scopeOf(), 0, 100);
  pages.close();
  await assert.rejects(pending, /closing/);
});

test('the feed reads in the thread unless that would parse a schema not known to be small; a page asked for twice in a turn is read once', async (t) => {
  const p = await startProduct();
  t.after(() => p.close());
  const counts = { thread: 0, executor: 0 };
  const feed = new DeliveryFeed(join(p.dataDir, 'db'), await executorPages(p, t), { read: (by) => counts[by]++, tripped: () => assert.fail('no budget trips here') });
  t.after(() => feed.close());
  const file = (database: string) => join(p.dataDir, `db/acme/web/${database}.sqlite`);
  const bytes = (database: string) => ['', '-wal'].reduce((n, suffix) => n + (statSync(file(database) + suffix, { throwIfNoEntry: false })?.size ?? 0), 0);
  /** Where the feed read `database`'s next pages, one after the other. */
  const where = async (database: string, n: number): Promise<string[]> => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const before = { ...counts };
      feed.hint(scopeOf(database), 0); // as a commit would: else the page read just now is handed out again
      await feed.readChanges(scopeOf(database), 0, 100);
      out.push(counts.thread > before.thread ? 'thread' : 'executor');
    }
    return out;
  };
  const write = async (database: string, sql: string) => assert.equal((await p.db('web', 'execute', { database, sql })).status, 200);

  // A small file cannot hold a large schema: read in the thread from the first read on.
  await write('small', 'CREATE TABLE t (v)');
  assert.deepEqual(await where('small', 2), ['thread', 'thread']);

  // A large file with a small schema: the executor's first read says it is small; then the thread reads it.
  await write('big', 'CREATE TABLE t (v)');
  await write('big', 'INSERT INTO t VALUES (randomblob(400000))');
  assert.ok(bytes('big') > IN_THREAD_SCHEMA_BYTES);
  assert.deepEqual(await where('big', 3), ['executor', 'thread', 'thread']);
  // New DDL: the thread does not know that schema yet; once an executor has said it is small, the thread reads again.
  await write('big', 'CREATE TABLE u (v)');
  assert.deepEqual(await where('big', 2), ['executor', 'thread']);
  assert.equal(await feed.currentVersion(scopeOf('big')), 3);

  // A large schema: the thread would parse it, so executors read every page.
  await write('huge', 'CREATE TABLE pad (x)');
  await write('huge', `CREATE TRIGGER g AFTER DELETE ON pad BEGIN ${'SELECT 0; '.repeat(IN_THREAD_SCHEMA_BYTES / 10 + 1000)}END`);
  assert.deepEqual(await where('huge', 3), ['executor', 'executor', 'executor']);
  const before = { ...counts };
  assert.equal(await feed.currentVersion(scopeOf('huge')), 2);
  assert.deepEqual(counts, { ...before, executor: before.executor + 1 });
  assert.equal(await feed.currentVersion(scopeOf('nothing')), null);

  // Two lanes (mirrors) asking for the same page in one turn: one read, one page; after a hint, a new read.
  const [a, b] = [feed.readChanges(scopeOf('huge'), 0, 64), feed.readChanges(scopeOf('huge'), 0, 64)];
  assert.equal(a, b);
  const executorReads = counts.executor;
  await a;
  assert.equal(counts.executor, executorReads + 1);
  const [c] = [feed.readChanges(scopeOf('small'), 0, 64), feed.hint(scopeOf('small'), 1)];
  assert.notEqual(feed.readChanges(scopeOf('small'), 0, 64), c, 'a page read before a hint is not handed out after it');
});

test('a database deleted and made again under the same name is read anew; missing and half-made files', async (t) => {
  const dataDir = tempDir();
  const files = new ChangeLogFiles(join(dataDir, 'db'));
  t.after(() => {
    files.close();
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
  assert.deepEqual(inThread(files, scopeOf(), 0, 100).events.map((e) => e.version), [1, 2, 3, 4]); // the reader stays open
  const remove = () => {
    for (const suffix of ['', '-wal', '-shm']) rmSync(join(dataDir, `db/acme/web/main.sqlite${suffix}`), { force: true });
  };
  remove();
  await writes(2);
  const again = inThread(files, scopeOf(), 0, 100);
  assert.equal(again.version, 2);
  assert.deepEqual(again.events.map((e) => e.version), [1, 2]);
  remove();
  assert.throws(() => files.read(scopeOf(), 0, 100), (e) => code(e) === 'database_not_found');
  assert.equal(files.version(scopeOf()), null);
  // A file the executor has just created, before its internal tables: nothing to deliver yet, not an error.
  writeFileSync(join(dataDir, 'db/acme/web/fresh.sqlite'), '');
  assert.deepEqual(files.read(scopeOf('fresh'), 0, 100), { events: [], version: 0 });
  assert.equal(files.version(scopeOf('fresh')), 0);
});

test('a read the full disk refuses leaves no connection behind: the database is not held locked for later readers', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('mounting a tmpfs needs root (CI runs as root)');
  const dir = tempDir('scopebase-full-feed-');
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'tmpfs', dir]);
  const files = new ChangeLogFiles(join(dir, 'db'));
  t.after(() => {
    files.close();
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
  assert.throws(() => files.read(scopeOf(), 0, 10), /disk I\/O error/);
  // A reader that needs the database to itself (as the executors' read on a full disk does) gets it: the refused
  // read kept no lock.
  const alone = openSqlite(file, { timeout: 0 });
  t.after(() => alone.close());
  alone.exec('PRAGMA locking_mode=EXCLUSIVE');
  assert.deepEqual({ ...alone.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() }, { value: 1 });
});

test('a schema the thread parsed is remembered by its cookie: a connection opened again reads at once; after DDL a large file waits for an executor', (t) => {
  const dataDir = tempDir();
  const files = new ChangeLogFiles(join(dataDir, 'db'));
  t.after(() => {
    files.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  /** A database file as the executor leaves it (its internal tables, one event), made here without the product: 33 of them. */
  const make = (database: string) => {
    const file = join(dataDir, `db/acme/web/${database}.sqlite`);
    mkdirSync(dirname(file), { recursive: true });
    const db = openSqlite(file);
    db.exec(`PRAGMA journal_mode=WAL; CREATE TABLE _scopebase_meta(key TEXT PRIMARY KEY, value); CREATE TABLE _scopebase_changes(version INTEGER PRIMARY KEY, committed_at, event TEXT);
      CREATE TABLE t(v); INSERT INTO _scopebase_meta VALUES ('version', 1); INSERT INTO _scopebase_changes VALUES (1, 0, '{"version":1}')`);
    return db;
  };
  const grow = make('grow');
  t.after(() => grow.close());
  assert.equal(inThread(files, scopeOf('grow'), 0, 10).version, 1, 'a small file: its schema parsed in the thread');
  grow.exec('INSERT INTO t VALUES (randomblob(400000))'); // data only: the schema (and its cookie) unchanged
  for (let i = 0; i < 32; i++) {
    make(`other${i}`).close();
    inThread(files, scopeOf(`other${i}`), 0, 10);
  }
  assert.equal(inThread(files, scopeOf('grow'), 0, 10).version, 1, 'its connection closed (32 others opened since) and opened again: read here, the schema known small');
  grow.exec('CREATE TABLE u(v)');
  assert.equal(files.read(scopeOf('grow'), 0, 10), NOT_HERE, 'a schema not known yet, in a file that could hold a large one');
  files.learn(scopeOf('grow'), files.identify(scopeOf('grow'))!, { bytes: 1000, cookie: Number((grow.prepare('PRAGMA schema_version').get() as { schema_version: number }).schema_version) });
  assert.equal(inThread(files, scopeOf('grow'), 0, 10).version, 1, 'an executor said it is small');
});
