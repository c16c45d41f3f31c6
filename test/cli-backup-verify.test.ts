// SPEC 9.2: `scopebase verify` (and restore's refusal) against real backups of the real product: a damaged database
// left out by name, and altered, missing, unlisted, hostile (symlink, FIFO) or gutted files refused by name.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, symlinkSync, unlinkSync, writeFileSync, writeSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { failedInOneLine } from './helpers/cli.ts';
import { backupCli, startWithData } from './helpers/backup.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

let p: Product;
const work = tempDir('scopebase-backup-verify-');
const cli = backupCli(() => p.dataDir);

// The backup these tests verify, copy and damage: b1, of the same data as cli-backup.test.ts backs up.
before(async () => {
  ({ p } = await startWithData(join(work, 'data')));
  const b = await cli(['backup', join(work, 'b1')]);
  assert.equal(b.code, 0, b.stderr);
});
after(async () => {
  await p.close();
  rmSync(work, { recursive: true, force: true });
});

test('one repo\'s damaged database does not stop the backup of every other: it is left out, named, and the exit says so', async () => {
  const dataDir = tempDir('scopebase-backup-damaged-');
  const q = await startProduct({ DATA_DIR: dataDir });
  try {
    assert.equal((await q.db('good', 'execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    assert.equal((await q.db('bad', 'execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
  } finally {
    await q.close();
  }
  const bad = join(dataDir, 'db', 'acme', 'bad', 'main.sqlite');
  const db = openSqlite(bad);
  db.enableDefensive(false);
  db.exec("PRAGMA writable_schema=ON; UPDATE sqlite_schema SET sql = 'CREATE TABLE t(x' WHERE name = 't'; PRAGMA writable_schema=OFF");
  db.close();
  const out = join(work, 'with-damaged');
  const r = await cli(['backup', out], { DATA_DIR: dataDir });
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /db\/acme\/bad\/main\.sqlite is damaged .*: left out of this backup/);
  assert.match(r.stderr, /the backup in .* is kept without 1 damaged database\(s\) SQLite could not read: db\/acme\/bad\/main\.sqlite/);
  const manifest = JSON.parse(readFileSync(join(out, 'manifest.json'), 'utf8'));
  assert.deepEqual(manifest.skipped.map((x: { path: string }) => x.path), ['db/acme/bad/main.sqlite']);
  assert.ok(manifest.files.some((f: { path: string }) => f.path === 'db/acme/good/main.sqlite'), 'every other database is in it');
  const verified = await cli(['verify', out], { DATA_DIR: dataDir });
  assert.equal(verified.code, 0, 'what it holds verifies');
  assert.match(verified.stdout, /; left out when it was taken \(damaged\): db\/acme\/bad\/main\.sqlite\n$/, 'and it says it is not the whole instance');
});

test('a backup folder holding a symlink, a FIFO or a folder where a file is listed is refused by name, never followed or read (attack round 3)', async () => {
  const from = join(work, 'with-damaged'); // the backup the test above kept
  const listed = 'db/acme/good/main.sqlite';
  const cases: [string, (path: string) => void, RegExp][] = [
    // The same bytes outside the backup: size and SHA-256 match, so only the link itself gives it away.
    ['symlink', (path) => { const outside = join(work, 'outside.sqlite'); cpSync(path, outside); rmSync(path); symlinkSync(outside, path); }, /a symbolic link/],
    ['fifo', (path) => { rmSync(path); execFileSync('mkfifo', [path]); }, /not a regular file/],
    ['folder', (path) => { rmSync(path); mkdirSync(path); }, /not a regular file/],
    ['linked folder', (path) => { const dir = join(path, '..'); const outside = join(work, 'outside-dir'); cpSync(dir, outside, { recursive: true }); rmSync(dir, { recursive: true }); symlinkSync(outside, dir); }, /a symbolic link/],
  ];
  for (const [what, make, problem] of cases) {
    const hostile = join(work, `hostile-${what.replace(' ', '-')}`);
    cpSync(from, hostile, { recursive: true });
    make(join(hostile, listed));
    const verify = await cli(['verify', hostile]);
    assert.equal(verify.code, 1, `${what}: ${verify.stdout}${verify.stderr}`);
    assert.match(verify.stdout, new RegExp(`BAD ${listed.replaceAll('/', '\\/')}: ${problem.source}`), what);
    const target = join(work, `restored-${what.replace(' ', '-')}`);
    const restore = await cli(['restore', hostile], { DATA_DIR: target });
    assert.equal(restore.code, 1, `${what}: ${restore.stderr}`);
    assert.match(restore.stderr, /refusing to restore, nothing was written/, what);
    assert.equal(existsSync(join(target, listed)), false, `${what}: nothing restored`);
  }
});

test('verify says OK for a good backup, and verify and restore name a file that was altered or is missing', async () => {
  const ok = await cli(['verify', join(work, 'b1')]);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /^OK: 6 files match the manifest/);

  const altered = join(work, 'altered');
  cpSync(join(work, 'b1'), altered, { recursive: true });
  const fd = openSync(join(altered, 'db/acme/api/main.sqlite'), 'r+');
  writeSync(fd, Buffer.from('x'), 0, 1, 5000); // same size, other bytes
  closeSync(fd);
  const v = await cli(['verify', altered]);
  assert.match(v.stdout, /^BAD db\/acme\/api\/main\.sqlite: altered/m);
  failedInOneLine(v, /1 bad file: db\/acme\/api\/main\.sqlite/);
  const target = join(work, 'never');
  const r = await cli(['restore', altered], { DATA_DIR: target });
  failedInOneLine(r, /refusing to restore, nothing was written: db\/acme\/api\/main\.sqlite is altered/);
  assert.equal(existsSync(target), false);

  const missing = join(work, 'missing');
  cpSync(join(work, 'b1'), missing, { recursive: true });
  unlinkSync(join(missing, 'accounts.sqlite'));
  const vm = await cli(['verify', missing]);
  assert.match(vm.stdout, /^BAD accounts\.sqlite: missing/m);
  failedInOneLine(vm, /accounts\.sqlite/);
  failedInOneLine(await cli(['restore', missing], { DATA_DIR: target }), /accounts\.sqlite is missing/);
  assert.equal(existsSync(target), false);
  assert.deepEqual(readdirSync(work).filter((n) => n.includes('.restore-')), []);

  failedInOneLine(await cli(['verify', join(work, 'data')]), /has no manifest\.json/);
});

/** A copy of backup b1 whose manifest `edit` changed (as a hand, a script or a bad copy might). */
function editedCopy(name: string, edit: (m: Record<string, any>) => void): string { // eslint-disable-line @typescript-eslint/no-explicit-any
  const dir = join(work, name);
  cpSync(join(work, 'b1'), dir, { recursive: true });
  const m = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
  edit(m);
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify(m, null, 2));
  return dir;
}

/** The manifest a version 1 backup (before its own checksum) wrote. */
const asVersion1 = (m: Record<string, unknown>) => {
  m.formatVersion = 1;
  delete m.manifestSha256;
};

test('a backup verifies only as complete: a file its manifest does not list, an edited manifest or a gutted one is refused by verify and restore', async () => {
  const target = join(work, 'never-restored');
  const refused = async (dir: string, verifyLine: RegExp, restoreLine: RegExp) => {
    const v = await cli(['verify', dir]);
    assert.equal(v.code, 1, `${dir}: ${v.stdout}${v.stderr}`);
    failedInOneLine(v, verifyLine);
    failedInOneLine(await cli(['restore', dir], { DATA_DIR: target }), restoreLine);
    assert.equal(existsSync(target), false, 'nothing restored');
  };

  // "files": [] verified "OK: 0 files", and restore then restored nothing. The manifest's own checksum shows the edit.
  const gutted = editedCopy('gutted', (m) => void (m.files = []));
  await refused(gutted, /manifest\.json was changed after the backup wrote it/, /manifest\.json was changed after the backup wrote it/);
  // A version 1 manifest has no checksum: the files it does not list show it.
  const gutted1 = editedCopy('gutted-v1', (m) => {
    asVersion1(m);
    m.files = m.files.filter((f: { kind: string }) => f.kind !== 'database');
  });
  const v = await cli(['verify', gutted1]);
  assert.match(v.stdout, /^BAD db\/acme\/web\/main\.sqlite: not listed in the manifest$/m);
  await refused(gutted1, /4 bad files: .*db\/acme\/web\/main\.sqlite/, /refusing to restore, nothing was written: db\/acme\/\w+\/\w+\.sqlite is not listed in the manifest/);

  // A file put into a backup (another database, anything) is not part of it.
  const extra = join(work, 'extra');
  cpSync(join(work, 'b1'), extra, { recursive: true });
  mkdirSync(join(extra, 'db/acme/extra'));
  cpSync(join(extra, 'db/acme/web/main.sqlite'), join(extra, 'db/acme/extra/main.sqlite'));
  await refused(extra, /1 bad file: db\/acme\/extra\/main\.sqlite/, /db\/acme\/extra\/main\.sqlite is not listed in the manifest/);

  // An entry that is not what a backup writes: a database relabelled a key would skip integrity_check and the restore's
  // own version.
  const relabelled = editedCopy('relabelled', (m) => {
    asVersion1(m);
    m.files.find((f: { path: string }) => f.path === 'db/acme/web/main.sqlite').kind = 'key';
  });
  await refused(relabelled, /lists a malformed entry \("db\/acme\/web\/main\.sqlite"\): not a store or key/, /lists a malformed entry/);

  // A complete version 1 backup (taken before the checksum) still verifies and restores.
  const old = editedCopy('version1', asVersion1);
  const ok = await cli(['verify', old]);
  assert.equal(ok.code, 0, ok.stdout + ok.stderr);
  assert.match(ok.stdout, /^OK: 6 files match the manifest of .* and pass integrity_check; the backup holds no file it does not list\n$/);
  assert.equal((await cli(['restore', old], { DATA_DIR: target })).code, 0);
});
