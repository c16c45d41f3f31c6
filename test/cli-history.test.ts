// `scopebase history`: a database's versions newest first, read from POST /_db/changes (SPEC 4.9), so a user can pick
// restore-db's --to-version (SPEC 4.11) without curl. Against the real product over HTTP, as a user runs it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cliForFile, failedInOneLine, oneLine } from './helpers/cli.ts';

const TITLE = '\x1b]0;owned\x07'; // an ESC sequence in a table name would set the terminal's title

const { cli, work } = cliForFile('scopebase-cli-history-', async () => {
  const migrations = join(work, 'migrations');
  mkdirSync(migrations);
  writeFileSync(join(migrations, '0001_todos.sql'), 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT NOT NULL)\n');
  writeFileSync(join(migrations, '0002_tags.sql'), 'CREATE TABLE tags(todo INTEGER, name TEXT)\n');
  for (const args of [
    ['migrate', migrations, 'acme/web'], // 1: both migrations
    ['execute', 'acme/web', "INSERT INTO todos(title) VALUES ('a'), ('b')"], // 2
    ['execute', 'acme/web', `CREATE TABLE "notes${TITLE}" (body TEXT)`], // 3
    ['execute', 'acme/web', "DELETE FROM todos WHERE title = 'b'"], // 4
    ['restore-db', 'acme/web', '--to-version', '2'], // 5
  ]) {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
  }
});

test('history lists the versions newest first: time, what made each, rows, tables and migration ids', async () => {
  const r = await cli(['history', 'acme/web']);
  assert.equal(r.code, 0, r.stderr);
  const lines = r.stdout.trimEnd().split('\n');
  assert.equal(lines[0], 'acme/web/main: version 5');
  assert.match(lines[1]!, /^history: restorable from version 0 \(\d{4}-\d\d-\d\dT[\d:.]+Z\)$/);
  assert.match(lines[3]!, /^version {2}committed at +made by +rows {2}tables +migrations$/);
  const rows = lines.slice(5);
  assert.deepEqual(rows.map((l) => Number(l.trim().split(/\s+/)[0])), [5, 4, 3, 2, 1], 'newest first');
  assert.match(rows[0]!, /^ +5 {2}\d{4}-\d\d-\d\dT[\d:.]+Z {2}restore to 2 +0 {2}/);
  assert.match(rows[1]!, /^ +4 {2}\S+ {2}execute +1 {2}todos$/);
  assert.match(rows[2]!, /^ +3 {2}\S+ {2}execute +0 {2}notes\\x1b\]0;owned\\x07$/, 'a tenant\'s table name, its control characters escaped');
  assert.match(rows[4]!, /^ +1 {2}\S+ {2}migrate +0 {2}tags, todos +0001_todos, 0002_tags$/);
  assert.doesNotMatch(r.stdout, /[\x00-\x08\x0b-\x1f\x7f-\x9f]/, 'nothing a terminal acts on'); // eslint-disable-line no-control-regex
  assert.equal(r.stderr, '(5 versions)\n');

  // The time it shows is the one restore-db goes by.
  const v2 = rows[3]!.trim().split(/\s+/)[1]!;
  const dry = await cli(['restore-db', 'acme/web', '--to-time', v2, '--dry-run']);
  assert.equal(dry.code, 0, dry.stderr);
  assert.match(dry.stdout, new RegExp(`^would restore acme/web/main to version 2 \\(committed ${v2.replaceAll('.', '\\.')}\\)`));
});

test('--limit pages, and the last line gives the next page\'s command, which lists the older ones', async () => {
  const first = await cli(['history', 'acme/web', '--limit', '2']);
  assert.equal(first.code, 0, first.stderr);
  assert.equal(first.stderr, '(2 versions; older: scopebase history acme/web --before 4 --limit 2)\n');
  const next = await cli(['history', 'acme/web', '--before', '4', '--limit', '2']);
  assert.equal(next.code, 0, next.stderr);
  assert.deepEqual(next.stdout.trimEnd().split('\n').slice(5).map((l) => Number(l.trim().split(/\s+/)[0])), [3, 2]);
  const last = await cli(['history', 'acme/web', '--before', '2']);
  assert.equal(last.code, 0, last.stderr);
  assert.equal(last.stderr, '(1 version)\n', 'version 1 is the first: no older page');
});

test('--json: the versions without changesets or SQL, and the next page', async () => {
  const r = await cli(['history', 'acme/web', '--limit', '4', '--json']);
  assert.equal(r.code, 0, r.stderr);
  const out = JSON.parse(r.stdout);
  assert.equal(out.database, 'main');
  assert.equal(out.version, 5);
  assert.equal(out.history.oldestVersion, 0);
  assert.deepEqual(out.versions.map((v: { version: number }) => v.version), [5, 4, 3, 2]);
  assert.ok(out.versions[0].tables.includes('todos'), 'a restore names the tables it replaced');
  assert.deepEqual({ ...out.versions[0], committedAt: 'x', tables: [] }, { version: 5, committedAt: 'x', operation: 'restore', rowsAffected: 0, tables: [], restoredVersion: 2, restorable: true });
  assert.ok(out.versions.some((v: { tables: string[] }) => v.tables.includes(`notes${TITLE}`)), 'names exact in JSON');
  assert.deepEqual(out.next, { before: 2 });
  assert.equal(out.changeLogFrom, null);
  const one = await cli(['history', 'acme/web', '--before', '2', '--json']);
  const v1 = JSON.parse(one.stdout).versions[0];
  assert.deepEqual(v1.migrations, ['0001_todos', '0002_tags']);
  assert.equal(v1.operation, 'migrate');
  assert.ok(!('changeset' in v1) && !JSON.stringify(v1).includes('"sql"'), 'ids only');
});

test('a database not made yet, and a bad --limit or --before, fail in one line saying what to do', async () => {
  const missing = await cli(['history', 'acme/web', '--database', 'nope']);
  failedInOneLine(missing, /^scopebase: acme\/web has no database nope yet \(the repo's databases: main\): execute, migrate or import creates it$/);
  const json = await cli(['history', 'acme/web', '--database', 'nope', '--json']);
  assert.equal(JSON.parse(json.stdout).error.code, 'database_not_found');
  for (const args of [['--limit', '0'], ['--limit', '1001'], ['--limit', 'ten'], ['--before', '0']]) {
    const r = await cli(['history', 'acme/web', ...args]);
    assert.equal(r.code, 2, r.stderr);
    oneLine(r, new RegExp(`^scopebase: ${args[0]} must be a whole number from`));
  }
});

test('restore-db to a version out of reach says where to find the versions', async () => {
  const r = await cli(['restore-db', 'acme/web', '--to-version', '99', '--dry-run']);
  failedInOneLine(r, /400 invalid_request: version 99 is not reached yet: the database is at version 5 \(request [\w-]+\); `scopebase history` lists the versions with their times$/);
});
