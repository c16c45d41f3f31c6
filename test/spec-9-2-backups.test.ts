// SPEC 9.2 from the outside: `scopebase backup` of a serving product (databases, account, credential and delivery
// stores), its manifest checked against the files, verify, restore into an empty DATA_DIR only (or --force), and
// --incremental. (Failures midway, symlinks, damaged databases: cli-backup*.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { backupCli } from './helpers/backup.ts';
import { newSecret, Receiver } from './helpers/mirror.ts';

let p: Product;
const work = tempDir('scopebase-spec92-');
const receiver = new Receiver();
const cli = backupCli(() => p.dataDir);
before(async () => {
  await receiver.start();
  p = await startProduct({ DATA_DIR: join(work, 'data'), DB_MIRRORS: JSON.stringify([{ name: 'r', url: receiver.url, secret: newSecret() }]) });
  for (const [repo, database] of [['web', 'main'], ['web', 'logs'], ['api', 'main']] as const) {
    assert.equal((await p.db(repo, 'execute', { database, sql: 'CREATE TABLE t(v)' })).status, 200);
    assert.equal((await p.db(repo, 'execute', { database, sql: 'INSERT INTO t VALUES (1), (2)' })).status, 200);
  }
});
after(async () => {
  await p.close();
  await receiver.stop();
  rmSync(work, { recursive: true, force: true });
});

interface Entry { path: string; size: number; sha256: string; scope?: { org: string; repo: string; database: string }; version?: number }
const manifestOf = (dir: string): Entry[] => JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')).files;
const rows = (file: string): number => {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return Number((db.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n);
  } finally {
    db.close();
  }
};

test('a backup taken while the product serves: every database and the stores, each file as its manifest says', async () => {
  const b1 = join(work, 'b1');
  let writing = true;
  const loop = (async () => {
    while (writing) assert.equal((await p.db('web', 'execute', { database: 'logs', sql: 'INSERT INTO t VALUES (3)' })).status, 200);
  })();
  const b = await cli(['backup', b1]);
  writing = false;
  await loop;
  assert.equal(b.code, 0, b.stderr);
  assert.ok(b.stderr.trim().length > 0, 'progress on the terminal');
  const files = manifestOf(b1);
  const paths = files.map((f) => f.path);
  for (const store of ['accounts.sqlite', 'credentials.sqlite']) assert.ok(paths.includes(store), `${store}: ${paths.join(', ')}`);
  assert.ok(paths.some((x) => /mirror|deliver/.test(x)), `the delivery state: ${paths.join(', ')}`);
  const dbs = files.filter((f) => f.scope !== undefined);
  assert.deepEqual(dbs.map((f) => `${f.scope!.repo}/${f.scope!.database}`).sort(), ['api/main', 'web/logs', 'web/main']);
  for (const f of files) {
    const bytes = readFileSync(join(b1, f.path));
    assert.equal(f.size, bytes.length, f.path);
    assert.equal(f.sha256, createHash('sha256').update(bytes).digest('hex'), f.path);
  }
  const web = dbs.find((f) => f.scope!.repo === 'web' && f.scope!.database === 'main')!;
  assert.equal(web.version, 2);
  const logs = dbs.find((f) => f.scope!.database === 'logs')!;
  assert.equal(rows(join(b1, logs.path)), (logs.version as number), 'consistent: 2 rows at version 2, one more each version after');
});

test('verify checks a backup without restoring it, and names a file altered since', async () => {
  assert.equal((await cli(['verify', join(work, 'b1')])).code, 0);
  const copy = join(work, 'bad');
  mkdirSync(copy);
  for (const f of [...manifestOf(join(work, 'b1')).map((e) => e.path), 'manifest.json']) {
    mkdirSync(join(copy, f, '..'), { recursive: true });
    writeFileSync(join(copy, f), readFileSync(join(work, 'b1', f)));
  }
  const victim = manifestOf(copy).find((f) => f.scope?.repo === 'api')!.path;
  const bytes = readFileSync(join(copy, victim));
  bytes[bytes.length - 1] ^= 1;
  writeFileSync(join(copy, victim), bytes);
  const v = await cli(['verify', copy]);
  assert.notEqual(v.code, 0);
  assert.ok(`${v.stdout}${v.stderr}`.includes(victim), v.stderr);
  const r = await cli(['restore', copy], { DATA_DIR: join(work, 'from-bad') });
  assert.notEqual(r.code, 0, 'restore checks every checksum first');
  assert.ok(`${r.stdout}${r.stderr}`.includes(victim), r.stderr);
});

test('restore fills an empty DATA_DIR, refuses a non-empty one without --force', async () => {
  const target = join(work, 'restored');
  const r = await cli(['restore', join(work, 'b1')], { DATA_DIR: target });
  assert.equal(r.code, 0, r.stderr);
  const web = manifestOf(join(work, 'b1')).find((f) => f.scope?.repo === 'web' && f.scope.database === 'main')!;
  assert.equal(rows(join(target, web.path)), 2);
  const again = await cli(['restore', join(work, 'b1')], { DATA_DIR: target });
  assert.notEqual(again.code, 0);
  assert.match(again.stderr, /--force/);
  assert.equal((await cli(['restore', join(work, 'b1'), '--force'], { DATA_DIR: target })).code, 0);
  assert.ok(statSync(join(target, web.path)).size > 0);
});

test('--incremental: a backup after one more write verifies and restores completely', async () => {
  assert.equal((await p.db('api', 'execute', { sql: 'INSERT INTO t VALUES (9)' })).status, 200);
  const b2 = join(work, 'b2');
  const b = await cli(['backup', b2, '--incremental', join(work, 'b1')]);
  assert.equal(b.code, 0, b.stderr);
  assert.equal((await cli(['verify', b2])).code, 0);
  const target = join(work, 'restored2');
  assert.equal((await cli(['restore', b2], { DATA_DIR: target })).code, 0);
  const api = manifestOf(b2).find((f) => f.scope?.repo === 'api')!;
  assert.equal(api.version, 3);
  assert.equal(rows(join(target, api.path)), 3);
});
