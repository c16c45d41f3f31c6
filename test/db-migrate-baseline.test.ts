// `migrate` with `baseline` (docs/backups.md, "Keep migrating after an import"): an imported database records the
// migrations its content already holds without running them, so the same migration folder goes on deploying. Through
// real HTTP, the real CLI, the change log, time travel and the reference mirror.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { call, ROOT_KEY, startProduct, tempDir, type Product } from './helpers/product.ts';
import { upload } from './helpers/imports.ts';
import { runCli } from './helpers/cli.ts';
import { freePort } from './helpers/ports.ts';
import { newSecret, waitFor } from './helpers/mirror.ts';
import { applyEvents, openCopy } from '../src/db/apply-event.ts';

const M1 = { id: '0001_init', sql: 'CREATE TABLE todos (id INTEGER PRIMARY KEY, title TEXT NOT NULL);' };
const M2 = { id: '0002_tags', sql: 'CREATE TABLE tags (name TEXT PRIMARY KEY); CREATE INDEX todos_title ON todos(title);' };
const M3 = { id: '0003_done', sql: 'ALTER TABLE todos ADD COLUMN done INTEGER NOT NULL DEFAULT 0;' };

let p: Product;
let mirrorUrl: string;
const work = tempDir('scopebase-baseline-');

before(async () => {
  const secret = newSecret();
  const port = await freePort();
  p = await startProduct({
    DB_MIRRORS: JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${port}/hook`, secret }]), MIRROR_PORT: String(port), MIRROR_SECRET: secret,
    DB_MIRROR_MAX_BACKOFF_MS: '100',
  });
  mirrorUrl = p.running.mirrorUrl!;
});
after(async () => {
  await p.close();
  rmSync(work, { recursive: true, force: true });
});

/** A source database at 0001+0002 with rows, exported as a clean SQLite file (no applied-migration list in it). */
async function exported(repo: string): Promise<Buffer> {
  return (await exportOf(p, repo)).bytes;
}

/** Migrates `repo`, then POST /_db/export's bytes exactly (call() reads the body as text) and its x-db-last-migration. */
async function exportOf(on: Product, repo: string): Promise<{ bytes: Buffer; last: unknown }> {
  await migrated(on, repo);
  const res = await request(`${on.url}/${repo}/_db/export`, {
    method: 'POST', body: JSON.stringify({ format: 'sqlite' }),
    headers: { host: `acme.${on.config.baseDomain}`, authorization: `Bearer ${on.secret('acme', repo)}`, 'content-type': 'application/json' },
  });
  assert.equal(res.statusCode, 200);
  return { bytes: Buffer.from(await res.body.arrayBuffer()), last: res.headers['x-db-last-migration'] };
}

async function migrated(on: Product, repo: string): Promise<void> {
  assert.equal((await on.db(repo, 'migrate', { migrations: [M1, M2] })).status, 200);
  assert.equal((await on.db(repo, 'execute', { sql: "INSERT INTO todos (title) VALUES ('a'), ('b')" })).status, 200);
}

const mirrorQuery = (repo: string, body: unknown) => call(mirrorUrl, p.config.baseDomain, `/${repo}/_db/query`, { body, headers: { authorization: `Bearer ${p.secret('acme', repo)}` } });

test('after an import, baseline records the migrations the content holds and runs the later ones; a rerun changes nothing', async () => {
  const file = await exported('src');
  assert.equal((await upload(p, 'dst', 'database=main&mode=create', file)).status, 200);
  // The gap this closes: the same folder again fails on the first migration.
  const plain = await p.db('dst', 'migrate', { migrations: [M1, M2, M3] });
  assert.equal(plain.status, 400, plain.text);
  assert.match(plain.json.error.message, /already exists/);

  const dry = await p.db('dst', 'migrate', { migrations: [M1, M2, M3], baseline: '0002_tags', dryRun: true });
  assert.equal(dry.status, 200, dry.text);
  assert.deepEqual(dry.json, { applied: ['0003_done'], alreadyApplied: [], baselined: ['0001_init', '0002_tags'], version: 1, dryRun: true });
  assert.deepEqual((await p.db('dst', 'status', {})).json.migrations, { applied: 0, latest: null }, 'a dry run records nothing');

  const r = await p.db('dst', 'migrate', { migrations: [M1, M2, M3], baseline: '0002_tags' });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { applied: ['0003_done'], alreadyApplied: [], baselined: ['0001_init', '0002_tags'], version: 2, dryRun: false });
  assert.deepEqual((await p.db('dst', 'status', {})).json.migrations, { applied: 3, latest: '0003_done' });
  assert.deepEqual((await p.db('dst', 'query', { sql: 'SELECT title, done FROM todos ORDER BY id' })).json.results[0].rows, [['a', 0], ['b', 0]]);

  // The same deploy step again, and the plain one: nothing to do, nothing changes.
  const again = await p.db('dst', 'migrate', { migrations: [M1, M2, M3], baseline: '0002_tags' });
  assert.deepEqual(again.json, { applied: [], alreadyApplied: ['0001_init', '0002_tags', '0003_done'], baselined: [], version: 2, dryRun: false });
  assert.deepEqual((await p.db('dst', 'migrate', { migrations: [M1, M2, M3] })).json, { applied: [], alreadyApplied: ['0001_init', '0002_tags', '0003_done'], version: 2, dryRun: false });
  // The recorded checksums are the request's: a changed migration is a conflict as ever.
  const changed = await p.db('dst', 'migrate', { migrations: [M1, { ...M2, sql: `${M2.sql} ` }, M3] });
  assert.equal(changed.status, 409);
  assert.equal(changed.json.error.details.id, '0002_tags');

  const events = (await p.db('dst', 'changes', { since: 1 })).json.events;
  assert.deepEqual(events.map((e: Record<string, unknown>) => [e.type, e.operation, e.version, e.migrations, e.baselined]),
    [['database.migrated', 'migrate', 2, [M3], ['0001_init', '0002_tags']]]);

  // The reference mirror follows: the replica has the new column and the rows.
  const write = await p.db('dst', 'execute', { sql: "UPDATE todos SET done = 1 WHERE title = 'b'" });
  const read = await mirrorQuery('dst', { sql: 'SELECT title, done FROM todos ORDER BY id', minVersion: write.json.version });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json.results[0].rows, [['a', 0], ['b', 1]]);
});

test('a baseline alone is one new version and one migrated event with no migration to replay; the mirror converges; time travel undoes it', async () => {
  const file = await exported('src2');
  assert.equal((await upload(p, 'alone', 'database=main&mode=create', file)).status, 200);
  const before = await request(`${p.url}/alone/_db/snapshot`, { method: 'POST', body: '{}', headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${p.secret('acme', 'alone')}`, 'content-type': 'application/json' } });
  writeFileSync(join(work, 'follower.sqlite'), Buffer.from(await before.body.arrayBuffer()));
  const r = await p.db('alone', 'migrate', { migrations: [M1, M2], baseline: '0002_tags' });
  assert.deepEqual(r.json, { applied: [], alreadyApplied: [], baselined: ['0001_init', '0002_tags'], version: 2, dryRun: false });
  const [event] = (await p.db('alone', 'changes', { since: 1 })).json.events;
  assert.deepEqual([event.type, event.operation, event.migrations, event.baselined, event.changes], ['database.migrated', 'migrate', [], ['0001_init', '0002_tags'], { rowsAffected: 0, tables: [] }]);
  // A cluster follower's copy at version 1 takes the event's changeset, records included (apply-event.ts).
  const copy = openCopy(join(work, 'follower.sqlite'));
  try {
    assert.equal(applyEvents(copy, [event]), null);
    assert.deepEqual(copy.prepare('SELECT id FROM _scopebase_migrations ORDER BY seq').all().map((x) => x.id), ['0001_init', '0002_tags']);
  } finally {
    copy.close();
  }
  const write = await p.db('alone', 'execute', { sql: "INSERT INTO todos (title) VALUES ('c')" });
  assert.equal(write.json.version, 3);
  const read = await mirrorQuery('alone', { sql: 'SELECT title FROM todos ORDER BY id', minVersion: 3 });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json.results[0].rows, [['a'], ['b'], ['c']]);
  await waitFor(async () => (await p.db('alone', 'status', {})).json.mirrors[0].deliveredVersion === 3, 5000, 'delivered');
  // The applied list is part of a version: back to the import, none is recorded.
  assert.equal((await p.db('alone', 'restore', { toVersion: 1 })).status, 200);
  assert.deepEqual((await p.db('alone', 'status', {})).json.migrations, { applied: 0, latest: null });
});

test('refusals: an id not in the list, a database that does not exist (none is made), one with migrations recorded', async () => {
  const unknown = await p.db('refuse', 'migrate', { migrations: [M1], baseline: '0009_x' });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.json.error.code, 'invalid_request');
  assert.match(unknown.json.error.message, /"baseline" must be the id of one of the request's migrations.*"0009_x" is not among them/);
  assert.equal((await p.db('refuse', 'migrate', { migrations: [M1], baseline: 1 })).json.error.code, 'invalid_request');

  const missing = await p.db('refuse', 'migrate', { migrations: [M1], baseline: '0001_init' });
  assert.equal(missing.status, 404, missing.text);
  assert.equal(missing.json.error.code, 'database_not_found');
  assert.match(missing.json.error.message, /import the database first/);
  assert.equal((await p.db('refuse', 'status', {})).json.exists, false, 'no database was made');

  assert.equal((await p.db('refuse', 'migrate', { migrations: [M1] })).status, 200);
  const late = await p.db('refuse', 'migrate', { migrations: [M1, M2, M3], baseline: '0002_tags' });
  assert.equal(late.status, 409, late.text);
  assert.equal(late.json.error.code, 'migration_conflict');
  assert.match(late.json.error.message, /only on a database with none recorded; this one has 1 \(latest 0001_init\)/);
  assert.deepEqual((await p.db('refuse', 'status', {})).json.migrations, { applied: 1, latest: '0001_init' });
});

test('a baseline on a database that holds no table, view, index or trigger is refused: its content holds no migration', async () => {
  // Made and emptied (an import forgotten or into another database): recording 0001-0002 would have status claim them.
  assert.equal((await p.db('empty', 'execute', { statements: [{ sql: 'CREATE TABLE t (a)' }, { sql: 'DROP TABLE t' }] })).status, 200);
  // Up to the last one: nothing runs after it that would fail on the missing tables (with M3, SQLite's 400 did).
  const r = await p.db('empty', 'migrate', { migrations: [M1, M2], baseline: '0002_tags' });
  assert.equal(r.status, 409, r.text);
  assert.equal(r.json.error.code, 'migration_conflict');
  assert.match(r.json.error.message, /holds no table, view, index or trigger.*leave out baseline to run them/);
  assert.deepEqual((await p.db('empty', 'status', {})).json.migrations, { applied: 0, latest: null });
  const run = await p.db('empty', 'migrate', { migrations: [M1, M2, M3] });
  assert.equal(run.status, 200, run.text);
  assert.deepEqual(run.json.applied, ['0001_init', '0002_tags', '0003_done']);
});

test('CLI: export, import, then `migrate --baseline` with the same folder; the import names the way', async () => {
  const env = { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, BASE_DOMAIN: p.config.baseDomain };
  const cli = (args: string[]) => runCli([...args, '--url', p.url], env);
  const dir = join(work, 'migrations');
  mkdirSync(dir);
  for (const m of [M1, M2]) writeFileSync(join(dir, `${m.id}.sql`), m.sql);
  assert.equal((await cli(['migrate', dir, 'acme/clisrc'])).code, 0);
  const file = join(work, 'src.sqlite');
  const out = await cli(['export', 'acme/clisrc', '--output', file]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stderr, /\nmigrations: applied up to 0002_tags; after importing this copy, record them without running them: scopebase migrate <dir> --baseline 0002_tags\n$/);
  const summary = await cli(['export', 'acme/clisrc', '--output', file, '--json']);
  assert.equal(JSON.parse(summary.stdout).lastMigration, '0002_tags');
  const imported = await cli(['import', 'acme/clidst', file]);
  assert.equal(imported.code, 0, imported.stderr);
  assert.match(imported.stderr, /^migrations: none recorded \(an import empties that list\); if the imported content already holds your migrations, record them without running them: scopebase migrate <dir> --baseline <id of the last one it holds>/m);

  writeFileSync(join(dir, `${M3.id}.sql`), M3.sql);
  const bogus = await cli(['migrate', dir, 'acme/clidst', '--baseline', '0007_nope']);
  assert.equal(bogus.code, 2, bogus.stderr);
  assert.match(bogus.stderr, /--baseline 0007_nope is not a migration of .*: give the id .* e\.g\. 0003_done/);
  const r = await cli(['migrate', dir, 'acme/clidst', '--baseline', '0002_tags.sql']); // a file name works too
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^recorded as applied without running them 2: 0001_init, 0002_tags\napplied 1: 0003_done; already applied 0; version 2\n$/);
  const json = await cli(['migrate', dir, 'acme/clidst', '--baseline', '0002_tags', '--json']);
  assert.equal(json.code, 0, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout), { applied: [], alreadyApplied: ['0001_init', '0002_tags', '0003_done'], baselined: [], version: 2, dryRun: false, skipped: [] });
  const plain = await cli(['migrate', dir, 'acme/clidst']);
  assert.match(plain.stdout, /applied 0: \(none\); already applied 3; version 2/);
});

test('export names the last applied migration beside the clean copy (x-db-last-migration, also through a proxy to `serve db`); none: no header', async (t) => {
  assert.equal((await exportOf(p, 'hdr')).last, '0002_tags');
  assert.equal((await p.db('hdr', 'execute', { database: 'plain', sql: 'CREATE TABLE t (x)' })).status, 200);
  const plain = await request(`${p.url}/hdr/_db/export`, {
    method: 'POST', body: JSON.stringify({ database: 'plain' }),
    headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${p.secret('acme', 'hdr')}`, 'content-type': 'application/json' },
  });
  await plain.body.dump();
  assert.equal(plain.statusCode, 200);
  assert.equal(plain.headers['x-db-last-migration'], undefined);

  const d = await startProduct({}, 'db');
  const proxy = await startProduct({ DB_SERVICE_URL: d.url, ACCOUNT_SERVICE_URL: 'http://127.0.0.1:9' }, 'proxy');
  t.after(async () => {
    await proxy.close();
    await d.close();
  });
  assert.equal((await exportOf(proxy, 'split')).last, '0002_tags');
});
