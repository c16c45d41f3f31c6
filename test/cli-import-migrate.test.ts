// Moving an app onto scopebase with the CLI, as a newcomer does: import a D1 or drizzle database, then keep
// deploying the same migration folder (docs/backups.md, "Keep migrating after an import"); time travel; status.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { cliForFile, oneLine } from './helpers/cli.ts';

const { cli, work } = cliForFile('scopebase-cli-move-', () => {});

test('a WAL-mode file whose commits are still in its -wal (D1 under .wrangler/state, a running app) imports with them', async () => {
  const file = join(work, 'd1.sqlite');
  const db = new DatabaseSync(file);
  db.exec("PRAGMA journal_mode=WAL; CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT); INSERT INTO users(email) VALUES ('a@x.io'), ('b@x.io')");
  try {
    // Held open, as workerd holds it: nothing is checkpointed, the file itself has no table yet.
    const r = await cli(['import', 'acme/wal', file]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /into acme\/wal\/main: 1 table, 2 rows, version 1/); // was "0 tables, 0 rows", exit 0
    assert.match(r.stderr, /d1\.sqlite is in WAL mode and d1\.sqlite-wal beside it holds .* of commits not yet in it: importing a copy read through SQLite, with them/);
    assert.deepEqual(JSON.parse((await cli(['query', 'acme/wal', 'SELECT email FROM users ORDER BY id', '--json'])).stdout).rows, [['a@x.io'], ['b@x.io']]);
  } finally {
    db.close();
  }
});

test('after an import, a plain migrate that trips on what the import brought says to use --baseline', async () => {
  const dir = join(work, 'migrations');
  mkdirSync(dir);
  writeFileSync(join(dir, '0001_init.sql'), 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT);\n');
  writeFileSync(join(dir, '0002_done.sql'), 'ALTER TABLE todos ADD done INTEGER NOT NULL DEFAULT 0;\n');
  const dump = join(work, 'todos.sql');
  writeFileSync(dump, "CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT);\nINSERT INTO todos VALUES (1, 'x');\n");
  assert.equal((await cli(['import', 'acme/moved', dump])).code, 0);
  const plain = await cli(['migrate', dir, 'acme/moved']);
  assert.equal(plain.code, 1);
  assert.match(plain.stderr, /0001_init\.sql: table todos already exists; the database holds it already \(an import\?\) with no migration recorded: record the ones it holds without running them, e.g\. scopebase migrate .*migrations --baseline <the last one it holds>/);
  // A baseline short of what the import brought (a tool's stale record of its migrations): the same error, naming the remedy.
  const dump2 = join(work, 'todos2.sql');
  writeFileSync(dump2, 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT, done INTEGER NOT NULL DEFAULT 0);\n');
  assert.equal((await cli(['import', 'acme/moved2', dump2])).code, 0);
  const short = await cli(['migrate', dir, 'acme/moved2', '--baseline', '0001_init']);
  assert.equal(short.code, 1);
  assert.match(short.stderr, /0002_done\.sql: duplicate column name: done; the database holds it already: give --baseline the last migration its content holds, a later one than 0001_init/);
  // A baseline for a database not imported yet: the server says to import it; no hint that migrate would create it.
  const missing = await cli(['migrate', dir, 'acme/moved', '--database', 'nothere', '--baseline', '0001_init']);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /404 database_not_found: .*import the database first/);
  assert.doesNotMatch(missing.stderr, /creates it/);

  const baselined = await cli(['migrate', dir, 'acme/moved', '--baseline', '0001_init']);
  assert.equal(baselined.code, 0, baselined.stderr);
  assert.match(baselined.stdout, /applied 1: 0002_done/);
  // Once any is recorded, the same error is an ordinary one: no baseline hint.
  writeFileSync(join(dir, '0003_again.sql'), 'CREATE TABLE todos(x);\n');
  const later = await cli(['migrate', dir, 'acme/moved']);
  assert.equal(later.code, 1);
  assert.doesNotMatch(later.stderr, /--baseline/);
});

test("import names the --baseline that a D1 file's d1_migrations or a drizzle file's __drizzle_migrations records", async () => {
  const d1 = join(work, 'from-d1.sqlite');
  const a = new DatabaseSync(d1);
  a.exec(`CREATE TABLE d1_migrations(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT UNIQUE, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL);
    CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT);
    INSERT INTO d1_migrations(name) VALUES ('0001_init.sql'), ('0002_users.sql')`);
  a.close();
  assert.match((await cli(['status', 'acme/d1'])).stdout, /^database main: does not exist yet \(execute, migrate or import creates it\)$/m);
  const fromD1 = await cli(['import', 'acme/d1', d1]);
  assert.equal(fromD1.code, 0, fromD1.stderr);
  assert.match(fromD1.stderr, /^migrations: none recorded \(an import empties that list\); its d1_migrations table \(wrangler's\) ends at 0002_users\.sql: if wrangler applied every migration the content holds \(scopebase migrate does not write that table\), record them without running them: scopebase migrate <dir> --baseline 0002_users\.sql --dry-run, then without --dry-run \(docs\/backups\.md\)$/m);

  const dz = join(work, 'from-drizzle.db');
  const b = new DatabaseSync(dz);
  b.exec(`CREATE TABLE "__drizzle_migrations" (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at numeric);
    CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT);
    INSERT INTO "__drizzle_migrations"(hash, created_at) VALUES ('a', 1), ('b', 2), ('c', 3)`);
  b.close();
  const fromDrizzle = await cli(['import', 'acme/dz', dz]);
  assert.equal(fromDrizzle.code, 0, fromDrizzle.stderr);
  assert.match(fromDrizzle.stderr, /its __drizzle_migrations table \(drizzle-kit's\) records 3 applied: if drizzle-kit applied every migration the content holds .*: scopebase migrate <dir> --baseline <file 3 of the folder: drizzle-kit numbers from 0000, so 0002_…> --dry-run, then without --dry-run/);
});

test("restore-db's help quotes the history line status really prints", async () => {
  const quoted = /# "(history: [^"0-9]+)\d+"/.exec((await cli(['help', 'restore-db'])).stdout)?.[1];
  assert.ok(quoted, 'the help quotes a status line'); // it quoted "history: versions from 12", which status never printed
  assert.equal((await cli(['execute', 'acme/quoted', 'CREATE TABLE t(x)'])).code, 0);
  assert.match((await cli(['status', 'acme/quoted'])).stdout, new RegExp(`^${quoted}0 `, 'm'));
});

test('status and .tables say a full-text table whose content= table is gone is unreadable, not NULL rows', async () => {
  assert.equal((await cli(['execute', 'acme/fts', "CREATE VIRTUAL TABLE notes USING fts5(body, content='gone')"])).code, 0);
  assert.equal((await cli(['execute', 'acme/fts', "CREATE VIRTUAL TABLE ok USING fts5(body)"])).code, 0);
  const s = await cli(['status', 'acme/fts']);
  assert.equal(s.code, 0, s.stderr);
  assert.match(s.stdout, /^notes \(virtual: fts5\) +unreadable$/m);
  assert.match(s.stdout, /^ok \(virtual: fts5\) +0$/m);
  assert.match(s.stdout, /^\(unreadable: SQLite could not count its rows, e\.g\. a full-text table whose content= table is gone\)$/m);
  assert.doesNotMatch(s.stdout, /NULL/);
  assert.equal(JSON.parse((await cli(['status', 'acme/fts', '--json'])).stdout).tables[0].rows, null);
  const shell = await cli(['shell', 'acme/fts'], {}, '.tables\n.schema\n');
  assert.match(shell.stdout, /^notes \(virtual: fts5\) +unreadable$/m);
  // .schema shows what the user made, as .tables and status do: not the full-text tables' shadow tables.
  assert.match(shell.stdout, /^CREATE VIRTUAL TABLE ok USING fts5\(body\);$/m);
  assert.doesNotMatch(shell.stdout, /ok_data|ok_idx|ok_config|ok_docsize|notes_data/);
});

test('restore-db past a bad migration says it is undone and that the next migrate applies it again', async () => {
  const dir = join(work, 'tt-migrations');
  mkdirSync(dir);
  writeFileSync(join(dir, '0001_init.sql'), 'CREATE TABLE posts(id INTEGER PRIMARY KEY, body TEXT);\n');
  assert.equal((await cli(['migrate', dir, 'acme/tt'])).code, 0);
  assert.equal((await cli(['execute', 'acme/tt', "INSERT INTO posts(body) VALUES ('kept')"])).code, 0);
  const good = JSON.parse((await cli(['status', 'acme/tt', '--json'])).stdout).version;
  writeFileSync(join(dir, '0002_oops.sql'), 'DELETE FROM posts;\n');
  assert.equal((await cli(['migrate', dir, 'acme/tt'])).code, 0);
  const r = await cli(['restore-db', 'acme/tt', '--to-version', String(good)]);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^migrations: 1 applied now, latest 0001_init; undone 1: 0002_oops; the next migrate applies it again \(fix or remove a bad one's file first\)$/m);
  const dry = await cli(['restore-db', 'acme/tt', '--to-version', String(good), '--dry-run']);
  assert.doesNotMatch(dry.stdout, /migrations:/);
});

test('`restore` given --to-time or --to-version (time travel is restore-db) names the command to run', async () => {
  const r = await cli(['restore', 'acme/tt', '--to-version', '3']);
  assert.equal(r.code, 2);
  oneLine(r, /^scopebase: restore fills DATA_DIR from a whole-instance backup; to bring a database back to a version or a time, use restore-db: scopebase restore-db acme\/tt --to-version 3$/); // was "Did you mean --version?"
  oneLine(await cli(['restore', '--to-time', '2026-11-22 10:00:00+00:00', 'acme/tt']), /scopebase restore-db --to-time '2026-11-22 10:00:00\+00:00' acme\/tt$/);
});

test('import takes the file first too, as migrate takes its folder (it said "dump.sql is not org/repo"), and history shows the import', async () => {
  const dump = join(work, 'dump.sql');
  writeFileSync(dump, "CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT);\nINSERT INTO notes(body) VALUES ('x');\n");
  const r = await cli(['import', dump, 'acme/order']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^imported .*dump\.sql \(sql\) into acme\/order\/main: 1 table, 1 row, version 1$/m);
  const missing = await cli(['import', join(work, 'nope.sql'), 'acme/order']);
  assert.equal(missing.code, 2);
  oneLine(missing, /^scopebase: cannot read the file to import: .*nope\.sql/);
  const h = await cli(['history', 'acme/order']);
  assert.equal(h.code, 0, h.stderr);
  assert.match(h.stdout, /^ +1 {2}\S+ {2}import +0 {2}notes$/m);
});

test('migrate and shell\'s .status count one migration as one (they printed "1 migration file(s)", "1 migrations")', async () => {
  const dir = join(work, 'one-migration');
  mkdirSync(dir);
  writeFileSync(join(dir, '0001_init.sql'), 'CREATE TABLE t(x);\n');
  const m = await cli(['migrate', dir, 'acme/one']);
  assert.equal(m.code, 0, m.stderr);
  assert.match(m.stderr, /^read 1 migration file from /m);
  const r = await cli(['shell', 'acme/one'], {}, '.status\n');
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^database main: version 1, \d+ bytes, 1 migration$/m);
});

test('a golang-migrate or dbmate folder: down migrations are not applied (named as skipped), only the up part of a file holding both', async () => {
  const dir = join(work, 'updown');
  mkdirSync(dir);
  writeFileSync(join(dir, '000001_users.up.sql'), 'CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT);\n');
  writeFileSync(join(dir, '000001_users.down.sql'), 'DROP TABLE users;\n');
  writeFileSync(join(dir, '000002_tags.sql'), '-- migrate:up\nCREATE TABLE tags(id INTEGER PRIMARY KEY);\n\n-- migrate:down\nDROP TABLE tags;\n');
  const r = await cli(['migrate', dir, 'acme/updown']);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /skipped 000001_users\.down\.sql: a down migration/);
  const tables = JSON.parse((await cli(['query', 'acme/updown', "SELECT name FROM sqlite_schema WHERE type = 'table' AND name IN ('users', 'tags') ORDER BY name", '--json'])).stdout).rows;
  assert.deepEqual(tables, [['tags'], ['users']]); // before: the down file dropped nothing yet and failed, or dropped what its up made
  const again = await cli(['migrate', dir, 'acme/updown']);
  assert.equal(again.code, 0, again.stderr); // the same ids and checksums: nothing to do
});
