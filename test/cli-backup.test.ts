// SPEC 9.2: `scopebase backup|restore` as a subprocess against the real product and real files: a backup taken while
// writes go on restores to exactly what was committed (verify and damaged backups: cli-backup-verify.test.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, existsSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, unlinkSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { describeIoError } from '../src/cli/files.ts';
import { failedInOneLine, oneLine } from './helpers/cli.ts';
import { QUIET, backupCli, key, startWithData, write } from './helpers/backup.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

let p: Product;
let committed: Map<string, { rows: number; version: number }>;
const work = tempDir('scopebase-backup-');
const cli = backupCli(() => p.dataDir);

before(async () => {
  ({ p, committed } = await startWithData(join(work, 'data')));
});
after(async () => {
  await p.close();
  rmSync(work, { recursive: true, force: true });
});

async function readBack(q: Product, repo: string, database: string): Promise<{ rows: number; version: number }> {
  const r = await q.db(repo, 'query', { database, sql: 'SELECT count(*) FROM t' });
  assert.equal(r.status, 200, r.text);
  return { rows: r.json.results[0].rows[0][0] as number, version: r.json.version as number };
}

test('a backup taken while writes go on restores into an empty DATA_DIR to exactly what was committed', async () => {
  const busyBefore = await readBack(p, 'busy', 'main');
  let stop = false;
  let writes = 0;
  const loop = (async () => {
    while (!stop) {
      await write(p, 'busy', 'main', 'INSERT INTO t(v) VALUES (randomblob(100))');
      await write(p, 'web', 'main', 'UPDATE t SET v = v WHERE 0'); // changes nothing: the version stays
      writes++;
    }
  })();
  const b = await cli(['backup', join(work, 'b1')]);
  const writesDuring = writes;
  stop = true;
  await loop;
  assert.equal(b.code, 0, b.stderr);
  assert.ok(writesDuring > 0, 'writes went on during the backup');
  assert.equal(b.stdout.trim(), join(work, 'b1'));
  assert.match(b.stderr, /^backup complete: 4 databases \(copied 4\), 2 stores and keys, /m);
  const busyAfter = await readBack(p, 'busy', 'main');

  const manifest = JSON.parse(readFileSync(join(work, 'b1', 'manifest.json'), 'utf8'));
  assert.deepEqual(manifest.files.map((f: { path: string }) => f.path).sort(), [
    'accounts.sqlite', 'credentials.sqlite', 'db/acme/api/main.sqlite', 'db/acme/busy/main.sqlite', 'db/acme/web/logs.sqlite', 'db/acme/web/main.sqlite',
  ]);
  const web = manifest.files.find((f: { path: string }) => f.path === 'db/acme/web/main.sqlite');
  assert.deepEqual(web.scope, { org: 'acme', repo: 'web', database: 'main' });
  assert.equal(web.version, committed.get('web/main')!.version);
  assert.match(web.sha256, /^[0-9a-f]{64}$/);
  assert.equal(web.size, statSync(join(work, 'b1', web.path)).size);

  const restored = join(work, 'restored');
  const r = await cli(['restore', join(work, 'b1')], { DATA_DIR: restored });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /restored 6 files/);
  assert.equal(statSync(restored).mode & 0o777, 0o700);
  assert.equal(statSync(join(restored, 'db', 'acme')).mode & 0o777, 0o700);
  assert.equal(statSync(join(restored, 'accounts.sqlite')).mode & 0o777, 0o600);
  assert.equal(statSync(join(restored, 'db/acme/web/main.sqlite')).mode & 0o777, 0o600);
  assert.deepEqual(readdirSync(work).filter((n) => n.includes('.restore-') || n.includes('.partial-')), [], 'no staging folder left');

  const q = await startProduct({ DATA_DIR: restored });
  try {
    // Each database goes on one version past its backup's: the restore's own, sent to mirrors as database.restored.
    for (const { repo, database } of QUIET) {
      const { rows, version } = committed.get(key(repo, database))!;
      assert.deepEqual(await readBack(q, repo, database), { rows, version: version + 1 }, `${repo}/${database}`);
    }
    // The busy database is one consistent snapshot: every insert is one version, and it lies between before and after.
    const busy = await readBack(q, 'busy', 'main');
    const busyCopied = busy.version - 1;
    assert.ok(busyCopied >= busyBefore.version && busyCopied <= busyAfter.version, JSON.stringify({ busy, busyBefore, busyAfter }));
    assert.equal(busy.rows - busyBefore.rows, busyCopied - busyBefore.version);
    // The first write after the restore can be undone: the restored version is the first restorable one (history
    // is not in the backup; it used to begin one version late, so that write was beyond undoing).
    const first = QUIET[0]!;
    const restoredAt = (await q.db(first.repo, 'status', { database: first.database })).json.version as number;
    assert.equal((await q.db(first.repo, 'execute', { database: first.database, sql: 'DELETE FROM t' })).status, 200);
    assert.equal((await q.db(first.repo, 'status', { database: first.database })).json.history.oldestVersion, restoredAt);
    const undo = await q.db(first.repo, 'restore', { database: first.database, toVersion: restoredAt });
    assert.equal(undo.status, 200, undo.text);
    assert.deepEqual(await readBack(q, first.repo, first.database), { ...committed.get(key(first.repo, first.database)), version: restoredAt + 2 });
  } finally {
    await q.close();
  }
});
test('restore refuses a non-empty DATA_DIR unless --force, which moves the old contents aside', async () => {
  const dir = join(work, 'occupied');
  mkdirSync(dir);
  writeFileSync(join(dir, 'something'), 'x');
  failedInOneLine(await cli(['restore', join(work, 'b1')], { DATA_DIR: dir }), /DATA_DIR .*occupied is not empty: .*--force/);
  assert.deepEqual(readdirSync(dir), ['something']);
  const f = await cli(['restore', join(work, 'b1'), '--force'], { DATA_DIR: dir });
  assert.equal(f.code, 0, f.stderr);
  assert.ok(existsSync(join(dir, 'db/acme/web/main.sqlite')));
  const aside = readdirSync(work).find((n) => n.startsWith('occupied.before-restore-'));
  assert.ok(aside, f.stdout);
  assert.deepEqual(readdirSync(join(work, aside)), ['something']);
  assert.match(f.stdout, /previous contents are in /);
});

test('--incremental copies only the databases that changed, and its backup restores completely', async () => {
  const base = await cli(['backup', join(work, 'base'), '--json']);
  assert.equal(base.code, 0, base.stderr);
  assert.equal(JSON.parse(base.stdout).copied, 4);
  const version = await write(p, 'api', 'main', 'INSERT INTO t(v) VALUES (?)', ['after the base']);
  const inc = await cli(['backup', join(work, 'inc'), '--incremental', join(work, 'base'), '--json']);
  assert.equal(inc.code, 0, inc.stderr);
  const summary = JSON.parse(inc.stdout);
  assert.deepEqual([summary.databases, summary.copied, summary.reused], [4, 1, 3]);
  const text = await cli(['backup', join(work, 'inc2'), '--incremental', join(work, 'inc')]);
  assert.match(text.stderr, /4 databases \(copied 0, reused 4 unchanged from /);

  const v = await cli(['verify', join(work, 'inc')]);
  assert.equal(v.code, 0, v.stdout + v.stderr);
  const restored = join(work, 'restored-inc');
  const r = await cli(['restore', join(work, 'inc')], { DATA_DIR: restored });
  assert.equal(r.code, 0, r.stderr);
  for (const [name, want] of [['api/main', committed.get('api/main')!.rows + 1], ['web/main', 5], ['web/logs', 3]] as const) {
    const db = openSqlite(join(restored, 'db/acme', `${name}.sqlite`), { readOnly: true });
    assert.equal((db.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, want, name);
    if (name === 'api/main') assert.equal((db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number }).value, version + 1);
    db.close();
  }
  assert.ok(existsSync(join(restored, 'accounts.sqlite')));

  // A previous backup's file that no longer matches its manifest is not reused.
  cpSync(join(work, 'inc'), join(work, 'inc-copy'), { recursive: true });
  const fd = openSync(join(work, 'inc-copy/db/acme/web/logs.sqlite'), 'r+');
  writeSync(fd, Buffer.from('x'), 0, 1, 5000);
  closeSync(fd);
  const again = await cli(['backup', join(work, 'inc3'), '--incremental', join(work, 'inc-copy')]);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stderr, /db\/acme\/web\/logs\.sqlite in the previous backup is altered.*: copied afresh/);
  assert.match(again.stderr, /copied 1, reused 3/);
});

test('a backup that fails midway exits 1 with what happened and leaves no manifest.json', async () => {
  const data = join(work, 'broken-data');
  mkdirSync(join(data, 'db/acme/aaa'), { recursive: true });
  mkdirSync(join(data, 'db/acme/zzz'), { recursive: true });
  const good = openSqlite(join(data, 'db/acme/aaa/main.sqlite'));
  good.exec('CREATE TABLE t(x); INSERT INTO t VALUES (1)');
  good.close();
  // A store that is not a database fails the whole backup (a repo's damaged database is left out instead: above).
  writeFileSync(join(data, 'accounts.sqlite'), Buffer.alloc(8192, 7));
  const target = join(work, 'half');
  failedInOneLine(await cli(['backup', target], { DATA_DIR: data }), /backup failed, nothing was kept: not a sound SQLite database: .*accounts\.sqlite/);
  assert.equal(existsSync(join(target, 'manifest.json')), false);
  assert.deepEqual(readdirSync(work).filter((n) => n.startsWith('half')), [], 'no partial folder left');

  failedInOneLine(await cli(['backup', '/proc/self/nope/backup']), /backup failed, nothing was kept: /);
  failedInOneLine(await cli(['backup', join(work, 'b1')]), /already exists and is not an empty folder/);
  assert.equal(describeIoError(Object.assign(new Error('write'), { code: 'ENOSPC' }), '/backups/x'), 'the disk is full: /backups/x');
  assert.match(describeIoError(Object.assign(new Error('database or disk is full'), { errcode: 13 }), 'f'), /^the disk is full/);
});

test('a backup stopped by SIGTERM removes its half-written folder', async () => {
  const data = join(work, 'many-data');
  for (let r = 0; r < 8; r++) {
    mkdirSync(join(data, `db/acme/r${r}`), { recursive: true });
    for (let d = 0; d < 15; d++) {
      const db = openSqlite(join(data, `db/acme/r${r}/d${d}.sqlite`));
      db.exec('CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(20000))');
      db.close();
    }
  }
  const target = join(work, 'stopped');
  const child = spawn(process.execPath, ['src/cli/main.ts', 'backup', target], { env: { ...process.env, DATA_DIR: data }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  while (!readdirSync(work).some((n) => n.startsWith('stopped.partial-'))) await new Promise((r) => setTimeout(r, 10));
  child.kill('SIGTERM');
  assert.equal(await exited, 1, stderr);
  assert.match(stderr, /backup interrupted by SIGTERM, nothing was kept/);
  assert.deepEqual(readdirSync(work).filter((n) => n.startsWith('stopped')), []);
});

test('the development key files in DATA_DIR are backed up and restored byte for byte, owner-only', async () => {
  const data = join(work, 'keys-data');
  mkdirSync(join(data, 'db/acme/web'), { recursive: true });
  writeFileSync(join(data, 'runtime-root.key'), `${'c'.repeat(64)}\n`, { mode: 0o600 });
  writeFileSync(join(data, 'account-encryption.key'), `${'d'.repeat(64)}\n`, { mode: 0o600 });
  openSqlite(join(data, 'db/acme/web/main.sqlite')).close();
  const b = await cli(['backup', join(work, 'keys'), '--json'], { DATA_DIR: data });
  assert.equal(b.code, 0, b.stderr);
  const files = JSON.parse(b.stdout).manifest as { path: string; kind: string }[];
  assert.deepEqual(files.filter((f) => f.kind === 'key').map((f) => f.path), ['runtime-root.key', 'account-encryption.key']);
  assert.doesNotMatch(b.stdout + b.stderr, /cccc|dddd/, 'no key in the output');
  assert.equal(statSync(join(work, 'keys', 'runtime-root.key')).mode & 0o777, 0o600);
  const restored = join(work, 'keys-restored');
  assert.equal((await cli(['restore', join(work, 'keys')], { DATA_DIR: restored })).code, 0);
  assert.equal(readFileSync(join(restored, 'account-encryption.key'), 'utf8'), `${'d'.repeat(64)}\n`);
});

test('a symlink does not get a backup into DATA_DIR, nor a restore from inside it; restore follows a DATA_DIR that is a link', async () => {
  const intoData = join(work, 'link-into-data');
  symlinkSync(join(p.dataDir, 'db/acme'), intoData);
  const r = await cli(['backup', join(intoData, 'zz')]);
  assert.equal(r.code, 2, r.stderr);
  oneLine(r, /^scopebase: .*\/data\/db\/acme\/zz is inside DATA_DIR \(.*\/data\): write the backup somewhere else$/);
  assert.equal(existsSync(join(p.dataDir, 'db/acme/zz')), false);
  const dataLink = join(work, 'data-link');
  symlinkSync(p.dataDir, dataLink);
  assert.equal((await cli(['backup', join(p.dataDir, 'x')], { DATA_DIR: dataLink })).code, 2, 'DATA_DIR named through a link');
  symlinkSync(join(work, 'b1'), join(work, 'b1-link'));
  const nested = await cli(['backup', join(work, 'b1', 'inner'), '--incremental', join(work, 'b1-link')]);
  assert.equal(nested.code, 2, nested.stderr);
  oneLine(nested, /inside the previous backup .*\/b1: write each backup into a folder of its own$/);

  // A backup copied into DATA_DIR, named through a link: restoring from it would move it aside with the old contents.
  cpSync(join(work, 'b1'), join(p.dataDir, 'old-backup'), { recursive: true });
  symlinkSync(join(p.dataDir, 'old-backup'), join(work, 'link-b1'));
  const overlap = await cli(['restore', join(work, 'link-b1'), '--force']);
  assert.equal(overlap.code, 2, overlap.stderr);
  oneLine(overlap, /the backup .* and DATA_DIR .* overlap/);
  rmSync(join(p.dataDir, 'old-backup'), { recursive: true });

  // DATA_DIR a link to an empty folder: the folder is filled and the link stays.
  mkdirSync(join(work, 'real-empty'));
  symlinkSync(join(work, 'real-empty'), join(work, 'empty-link'));
  const json = await cli(['restore', join(work, 'b1'), '--json'], { DATA_DIR: join(work, 'empty-link') });
  assert.equal(json.code, 0, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout), { dataDir: join(work, 'real-empty'), files: 6, bytes: JSON.parse(json.stdout).bytes, movedAside: null });
  assert.ok(lstatSync(join(work, 'empty-link')).isSymbolicLink());
  assert.ok(existsSync(join(work, 'empty-link/db/acme/web/main.sqlite')));
});

test('restore --json prints what it did; verify --json of a bad backup prints one JSON document, its list of bad files', async () => {
  const into = join(work, 'restored-json');
  const r = await cli(['restore', join(work, 'b1'), '--json'], { DATA_DIR: into });
  assert.equal(r.code, 0, r.stderr);
  const done = JSON.parse(r.stdout);
  assert.deepEqual(done, { dataDir: into, files: 6, bytes: done.bytes, movedAside: null });
  assert.ok(done.bytes > 0);

  const bad = join(work, 'bad-json');
  cpSync(join(work, 'b1'), bad, { recursive: true });
  unlinkSync(join(bad, 'accounts.sqlite'));
  const v = await cli(['verify', bad, '--json']);
  failedInOneLine(v, /1 bad file: accounts\.sqlite/);
  assert.deepEqual(JSON.parse(v.stdout).problems, [{ path: 'accounts.sqlite', problem: 'missing' }]);
});
