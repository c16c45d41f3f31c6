// SPEC 10: the `scopebase` command as a subprocess against the real product on loopback: every command, its
// --help (the same as `help <command>`), --json, and the exit codes 0/1/2/3/78 with one-line failures.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { ROOT_KEY, tempDir, type Product } from './helpers/product.ts';
import { cliForFile, oneLine, type Run } from './helpers/cli.ts';

let p: Product;
const { cli, work, port } = cliForFile('scopebase-cli-', (product) => {
  p = product;
});

test('every command: `<command> --help` and `help <command>` print the same description, and start --help starts nothing', async () => {
  const top = await cli(['--help']);
  assert.equal(top.code, 0);
  const commands = [...top.stdout.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
  for (const c of ['start', 'serve', 'secret', 'rotate-keys', 'query', 'execute', 'status', 'shell', 'migrate']) assert.ok(commands.includes(c), `${c} listed`);
  for (const c of commands) {
    const [a, b] = await Promise.all([cli([c, '--help'], { PORT: '1' }), cli(['help', c], { PORT: '1' })]);
    assert.equal(a.code, 0, `${c} --help: ${a.stderr}`);
    assert.equal(b.code, 0, `help ${c}: ${b.stderr}`);
    assert.match(a.stdout, new RegExp(`^Usage: scopebase ${c}`));
    assert.equal(a.stdout, b.stdout, c);
    assert.doesNotMatch(a.stderr, /is running/, `${c} --help runs nothing`);
  }
  const noArgs = await cli([]);
  assert.equal(noArgs.code, 2);
  assert.match(noArgs.stderr, /Usage: scopebase/);
});

test('execute, query and status print tables, --json is SPEC 4.2 JSON, and values round-trip', async () => {
  const created = await cli(['execute', 'acme/web', 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT, big INTEGER, data BLOB)']);
  assert.equal(created.code, 0, created.stderr);
  const inserted = await cli(['execute', '--repo', 'acme/web', 'INSERT INTO todos(title, big, data) VALUES (?, ?, ?) RETURNING id', '--params', '["write docs", {"$bigint": "9007199254740993"}, {"$blob": "AAEC"}]']);
  assert.equal(inserted.code, 0, inserted.stderr);
  assert.match(inserted.stdout, /1 row affected, last insert rowid 1/);
  const named = await cli(['execute', '--org', 'acme', '--repo', 'web', 'INSERT INTO todos(title) VALUES (:t)', '--params', '{"t": "ship"}']);
  assert.equal(named.code, 0, named.stderr);

  const table = await cli(['query', 'acme/web', 'SELECT id, title, big, data FROM todos ORDER BY id']);
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.trimEnd().split('\n');
  assert.match(lines[0]!, /^id\s+title\s+big\s+data$/);
  assert.match(lines[1]!, /^-+\s+-+/);
  assert.match(lines[2]!, /^ *1 {2}write docs {2}9007199254740993 {2}x'000102'$/);
  assert.match(lines[3]!, /^ *2 {2}ship +NULL +NULL$/);
  assert.equal(lines[0]!.indexOf('title'), lines[2]!.indexOf('write docs'), 'columns are aligned');
  assert.match(table.stderr, /\(2 rows\)/);

  const json = await cli(['query', 'acme/web', 'SELECT big, data FROM todos WHERE id = ?', '--params', '[1]', '--json']);
  assert.deepEqual(JSON.parse(json.stdout), { columns: ['big', 'data'], rows: [[{ $bigint: '9007199254740993' }, { $blob: 'AAEC' }]], version: 3 });

  const status = await cli(['status', 'acme/web']);
  assert.equal(status.code, 0, status.stderr);
  assert.match(status.stdout, /database main: version 3/);
  assert.match(status.stdout, /todos\s+2/);
  const statusJson = JSON.parse((await cli(['status', 'acme/web', '--json'])).stdout);
  assert.equal(statusJson.version, 3);
  assert.deepEqual(statusJson.tables, [{ name: 'todos', rows: 2 }]);
  const other = JSON.parse((await cli(['status', 'acme/web', '--database', 'other', '--json'])).stdout);
  assert.equal(other.exists, false);
});

test('the repo from an org host in --url (a *.localhost name the CLI resolves itself), its path, or the environment', async () => {
  const viaHost = await cli(['query', '--url', `http://acme.localhost:${port()}`, '--repo', 'web', 'SELECT 1 AS one', '--json']);
  assert.equal(viaHost.code, 0, viaHost.stderr);
  assert.deepEqual(JSON.parse(viaHost.stdout).rows, [[1]]);
  const viaPath = await cli(['query', '--url', `http://acme.localhost:${port()}/web`, 'SELECT 2 AS two', '--json']);
  assert.deepEqual(JSON.parse(viaPath.stdout).rows, [[2]], viaPath.stderr);
  const viaEnv = await cli(['query', 'SELECT 3 AS three', '--json'], { SCOPEBASE_URL: p.url, SCOPEBASE_REPO: 'acme/web' });
  assert.deepEqual(JSON.parse(viaEnv.stdout).rows, [[3]], viaEnv.stderr);
  const explicitSecret = await cli(['status', 'acme/web', '--json'], { RUNTIME_ROOT_KEY: '', SCOPEBASE_SECRET: p.secret('acme', 'web') });
  assert.equal(explicitSecret.code, 0, explicitSecret.stderr);
});

test('execute --file runs every statement of the file as one transaction', async () => {
  const file = join(work, 'seed.sql');
  writeFileSync(file, "CREATE TABLE tags(name TEXT UNIQUE);\n-- a comment; with a semicolon\nINSERT INTO tags VALUES ('a;b');\nINSERT INTO tags VALUES ('c')\n");
  const ok = await cli(['execute', 'acme/web', '--file', file]);
  assert.equal(ok.code, 0, ok.stderr);
  writeFileSync(file, "INSERT INTO tags VALUES ('d');\nINSERT INTO tags VALUES ('a;b');\n");
  const failed = await cli(['execute', 'acme/web', '--file', file]);
  assert.equal(failed.code, 1);
  oneLine(failed, /409 constraint_violation/);
  const rows = JSON.parse((await cli(['query', 'acme/web', 'SELECT name FROM tags ORDER BY name', '--json'])).stdout).rows;
  assert.deepEqual(rows, [['a;b'], ['c']], 'nothing of the failed file remains');
  const piped = await cli(['execute', 'acme/web', '--file', '-', '--json'], {}, "INSERT INTO tags VALUES ('e');");
  assert.equal(JSON.parse(piped.stdout).results[0].rowsAffected, 1, '--file - reads standard input');
});

test('restore-db brings a version back (--dry-run changes nothing); import loads a dump or a SQLite file', async () => {
  const v1 = JSON.parse((await cli(['execute', 'acme/history', 'CREATE TABLE notes(body TEXT)', '--json'])).stdout).version;
  await cli(['execute', 'acme/history', "INSERT INTO notes VALUES ('kept')"]);
  const v2 = JSON.parse((await cli(['status', 'acme/history', '--json'])).stdout).version;
  await cli(['execute', 'acme/history', 'DELETE FROM notes']);
  const status = await cli(['status', 'acme/history']);
  assert.match(status.stdout, new RegExp(`history: restorable from version 0 `));
  // Neither or both: the line names what --to-time takes (it said "<ISO time>", and unix seconds work too).
  for (const args of [[], ['--to-version', '1', '--to-time', '1795687200']]) {
    const r = await cli(['restore-db', 'acme/history', ...args]);
    assert.equal(r.code, 2, r.stderr);
    oneLine(r, /^scopebase: give one of --to-version <n> or --to-time <time> \(RFC 3339 with a UTC offset, e\.g\. 2026-11-22T10:00:00Z, or unix seconds\)$/);
  }
  const dry = await cli(['restore-db', 'acme/history', '--to-version', String(v2), '--dry-run']);
  assert.equal(dry.code, 0, dry.stderr);
  assert.match(dry.stdout, new RegExp(`would restore acme/history/main to version ${v2} .*dry run: nothing changed`));
  const real = await cli(['restore-db', 'acme/history', '--to-version', String(v2)]);
  assert.equal(real.code, 0, real.stderr);
  assert.match(real.stdout, new RegExp(`restored acme/history/main to version ${v2} \\(committed .*\\), as version ${v2 + 2}`));
  assert.deepEqual(JSON.parse((await cli(['query', 'acme/history', 'SELECT body FROM notes', '--json'])).stdout).rows, [['kept']]);
  const same = await cli(['restore-db', 'acme/history', '--to-version', String(v2 + 2)]);
  assert.equal(same.code, 0, same.stderr);
  assert.match(same.stdout, new RegExp(`acme/history/main is at version ${v2 + 2} \\(committed .*\\) already: nothing changed`));
  const future = await cli(['restore-db', 'acme/history', '--to-version', '999']);
  assert.equal(future.code, 1);
  oneLine(future, /not reached yet/);
  oneLine(await cli(['restore-db', 'acme/history']), /one of --to-version/);
  assert.ok(v1 >= 1);
  // Unix seconds, as wrangler d1 time-travel takes them: the version in force then.
  const at = JSON.parse((await cli(['restore-db', 'acme/history', '--to-version', String(v2), '--dry-run', '--json'])).stdout).restoredTo.committedAt;
  const unix = await cli(['restore-db', 'acme/history', '--to-time', String(Date.parse(at) / 1000), '--dry-run', '--json']);
  assert.equal(unix.code, 0, unix.stderr);
  assert.equal(JSON.parse(unix.stdout).restoredTo.committedAt, at);
  // RFC 3339 5.6 allows a space for the T, as `date --rfc-3339=seconds` prints it (it was a usage error).
  const spaced = await cli(['restore-db', 'acme/history', '--to-time', at.replace('T', ' ').replace('Z', '+00:00'), '--dry-run', '--json']);
  assert.equal(spaced.code, 0, spaced.stderr);
  assert.equal(JSON.parse(spaced.stdout).restoredTo.committedAt, at);

  const dump = join(work, 'dump.sql');
  writeFileSync(dump, "CREATE TABLE t(x);\nINSERT INTO t VALUES ('from a dump');\n");
  const imported = await cli(['import', 'acme/history', dump, '--database', 'copy']);
  assert.equal(imported.code, 0, imported.stderr);
  assert.match(imported.stdout, /imported .*dump\.sql \(sql\) into acme\/history\/copy: 1 table, 1 row, version 1/);
  assert.match(imported.stderr, /^migrations: none recorded \(an import empties that list\); if the imported content already holds your migrations, record them without running them: scopebase migrate <dir> --baseline/m);
  const again = await cli(['import', 'acme/history', dump, '--database', 'copy']);
  assert.equal(again.code, 1);
  oneLine(again, /exists: import with mode=replace/);
  oneLine(await cli(['import', 'acme/history', join(work, 'missing.sql')]), /cannot read/);

  const exported = await cli(['export', 'acme/history', '--format', 'sql', '--output', join(work, 'out.sql')]);
  assert.equal(exported.code, 0, exported.stderr);
  assert.match(exported.stderr, new RegExp(`exported acme/history/main at version ${v2 + 2} \\(sql, [0-9.]+ KiB\\) to .*out\\.sql`));
  assert.match(readFileSync(join(work, 'out.sql'), 'utf8'), /INSERT INTO "notes"\(rowid,"body"\) VALUES\(1,'kept'\);/);
  const back = await cli(['import', 'acme/history', join(work, 'out.sql'), '--database', 'roundtrip']);
  assert.equal(back.code, 0, back.stderr);
  const binary = await cli(['export', 'acme/history', '--output', join(work, 'out.sqlite')]);
  assert.equal(binary.code, 0, binary.stderr);
  assert.equal(readFileSync(join(work, 'out.sqlite')).subarray(0, 15).toString(), 'SQLite format 3');
  oneLine(await cli(['export', 'acme/history', '--format', 'csv']), /--format must be sqlite or sql/);
});

test('migrate names the files it will not use, --dry-run shows the SQL, a folder without migrations is an error', async () => {
  const dir = join(work, 'migrations');
  mkdirSync(join(dir, 'meta'), { recursive: true });
  writeFileSync(join(dir, 'notes.md'), 'not a migration');
  writeFileSync(join(dir, 'init.sql'), 'CREATE TABLE nope(x);');
  const empty = await cli(['migrate', dir, 'acme/web']);
  assert.equal(empty.code, 2);
  assert.match(empty.stderr, /skipped init\.sql: the name does not start with digits and an underscore/);
  assert.match(empty.stderr, /skipped meta: not a file/);
  assert.match(empty.stderr, /skipped notes\.md: not a \.sql file/);
  assert.match(empty.stderr, /no migration files in .*: name them NNNN_name\.sql/);

  writeFileSync(join(dir, '0001_projects.sql'), 'CREATE TABLE projects(id INTEGER PRIMARY KEY, name TEXT);');
  const dry = await cli(['migrate', dir, '--repo', 'acme/web', '--dry-run']);
  assert.equal(dry.code, 0, dry.stderr);
  assert.match(dry.stdout, /-- 0001_projects\.sql\nCREATE TABLE projects/);
  assert.match(dry.stdout, /would apply 1: 0001_projects; already applied 0/);
  const before = JSON.parse((await cli(['status', 'acme/web', '--json'])).stdout);
  assert.equal(before.migrations.applied, 0, 'a dry run changes nothing');

  const real = await cli(['migrate', 'acme/web', dir, '--json']); // either order of folder and repo
  assert.equal(real.code, 0, real.stderr);
  const r = JSON.parse(real.stdout);
  assert.deepEqual(r.applied, ['0001_projects']);
  assert.deepEqual(r.skipped.map((s: { file: string }) => s.file), ['init.sql', 'meta', 'notes.md']);

  // Numbers of different widths would run out of order by file name (10_ before 9_): refused, nothing sent.
  const widths = join(work, 'widths');
  mkdirSync(widths);
  writeFileSync(join(widths, '9_first.sql'), 'CREATE TABLE first(x);');
  writeFileSync(join(widths, '10_second.sql'), 'CREATE TABLE second(x);');
  const mixed = await cli(['migrate', widths, 'acme/web']);
  assert.equal(mixed.code, 2);
  oneLine(mixed, /10_second\.sql and 9_first\.sql are numbered with different widths, so file-name order would apply 10_second\.sql first: give every file the same number of digits \(e\.g\. 09_first\.sql\)/);
  assert.equal(JSON.parse((await cli(['status', 'acme/web', '--json'])).stdout).migrations.applied, 1, 'nothing more was applied');

  const missing = await cli(['migrate', join(work, 'no-such-folder'), 'acme/web']);
  assert.equal(missing.code, 2);
  oneLine(missing, /no folder .*no-such-folder/);

  // A failing migration, and one changed after it was applied: the message names the file.
  writeFileSync(join(dir, '0002_bad.sql'), 'CREATE TABLEE oops(x);');
  const named = (r: Run, pattern: RegExp) => {
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr.trim().split('\n').at(-1)!, pattern);
    assert.doesNotMatch(r.stderr, /\n\s+at |\.ts:\d+/);
  };
  for (const args of [['--dry-run'], []]) named(await cli(['migrate', dir, 'acme/web', ...args]), /sql_error: 0002_bad\.sql: near "TABLEE": syntax error/);
  rmSync(join(dir, '0002_bad.sql'));
  writeFileSync(join(dir, '0001_projects.sql'), 'CREATE TABLE projects(id INTEGER PRIMARY KEY, name TEXT NOT NULL);');
  named(await cli(['migrate', dir, 'acme/web']), /migration_conflict: 0001_projects\.sql: migration 0001_projects was applied with different SQL/);
});

test('shell: multi-line statements until ;, dot commands, reads and writes; a piped script fails when a statement does', async () => {
  const script = "CREATE TABLE notes(id INTEGER PRIMARY KEY,\n  body TEXT);\nINSERT INTO notes(body)\n VALUES ('hi');\nSELECT body\nFROM notes;\n.tables\n.schema notes\n.quit\nSELECT 'after quit';\n";
  const r = await cli(['shell', 'acme/web'], {}, script);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /1 row affected/);
  assert.match(r.stdout, /body\n----\nhi\n/);
  assert.match(r.stdout, /notes\s+1/);
  assert.match(r.stdout, /CREATE TABLE notes\(id INTEGER PRIMARY KEY,\n {2}body TEXT\);/);
  assert.doesNotMatch(r.stdout, /after quit/);
  const failing = await cli(['shell', 'acme/web'], {}, 'SELECT * FROM missing;\nSELECT 1 AS still_runs;\n');
  assert.equal(failing.code, 1);
  assert.match(failing.stderr, /sql_error: no such table: missing/);
  assert.match(failing.stdout, /still_runs/);
});

test('secret prints the repo secret; usage mistakes exit 2 with one line', async () => {
  const s = await cli(['secret', 'ACME/Web']);
  assert.equal(s.code, 0);
  assert.equal(s.stdout.trim(), p.secret('acme', 'web'));
  // Where no key exists yet (an app's folder, not the server's), it stops as `query` does, and makes none.
  const elsewhere = join(work, 'elsewhere-data');
  const refused = await cli(['secret', 'acme/web'], { RUNTIME_ROOT_KEY: undefined, DATA_DIR: elsewhere });
  assert.equal(refused.code, 78);
  assert.equal(refused.stdout, '');
  oneLine(refused, /^scopebase: configuration error: no key in .*elsewhere-data\/runtime-root\.key, so no secret for acme\/web: run this where the server runs, .*\(--create makes a new development key there instead\)$/);
  assert.throws(() => statSync(elsewhere), /ENOENT/, 'no folder, no key made');
  // --create makes one owner-only and says so.
  const made = await cli(['secret', 'acme/web', '--create'], { RUNTIME_ROOT_KEY: undefined, DATA_DIR: elsewhere });
  assert.equal(made.code, 0);
  assert.match(made.stdout.trim(), /^\S+$/);
  oneLine(made, /no key in .*elsewhere-data\/runtime-root\.key yet, so one was created; a server with another DATA_DIR or RUNTIME_ROOT_KEY will refuse this secret/);
  assert.equal(statSync(elsewhere).mode & 0o777, 0o700);
  const again = await cli(['secret', 'acme/web'], { RUNTIME_ROOT_KEY: undefined, DATA_DIR: elsewhere });
  assert.deepEqual([again.stdout, again.stderr], [made.stdout, ''], 'the same secret, silently, once the key exists');
  const cases: [string[], RegExp][] = [
    [['secret', 'acme'], /is not org\/repo/],
    [['secret', 'acme/\u212Aey'], /is not org\/repo/], // a look-alike is not folded into "key", as the server does not
    [['status', '\u212Acme/web'], /is not org\/repo/],
    [['query', 'SELECT 1'], /name the repo/],
    [['query', 'acme/web'], /give the SQL/],
    [['query', 'acme/web', 'SELECT 1', '--params', '{oops'], /--params is not JSON/],
    [['execute', 'acme/web'], /give the SQL as an argument or --file/],
    [['execute', 'acme/web', '--file', join(work, 'missing.sql')], /cannot read --file: .*ENOENT/],
    [['status', 'acme/web', '--database', 'Main'], /--database "Main" must match/],
    [['status', 'acme/web', '--url', 'ftp://x'], /is not an http\(s\) URL/],
    [['status', 'acme/web', '--org', 'other'], /--org other disagrees with acme\/web/],
    // --url's org host or repo path against the named repo: before, the named one won silently.
    [['status', 'acme/web', '--url', 'http://other.localhost:1'], /--url http:\/\/other\.localhost:1 is the host of the org other, but acme\/web names the org acme: give the org once$/],
    [['status', '--org', 'acme', '--repo', 'web', '--url', 'http://other.localhost:1'], /but --org acme names the org acme/],
    [['status', '--url', 'https://acme.example.com/web'], /name the repo: .* \(--url's host acme\.example\.com is not \{org\}\.localhost: export the server's BASE_DOMAIN here to read the org from it\)$/],
    [['status', 'acme/web', '--url', 'http://acme.localhost:1/api'], /--url http:\/\/acme\.localhost:1\/api has the repo api as its path, but acme\/web names the repo web: give the repo once$/],
  ];
  for (const [args, message] of cases) {
    const r = await cli(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    oneLine(r, message);
  }
  for (const args of [['bogus'], ['query', '--bogus'], ['serve', 'nothing']]) {
    const r = await cli(args);
    assert.equal(r.code, 2, args.join(' '));
    assert.doesNotMatch(r.stderr, /\n\s+at /);
  }
});

test('a bad or stale value from SCOPEBASE_URL, _REPO, _DATABASE or _SECRET is named as that variable, not as an option never typed', async () => {
  const usage = (r: Run, pattern: RegExp) => {
    assert.equal(r.code, 2, r.stderr);
    oneLine(r, pattern);
  };
  usage(await cli(['status', 'acme/web'], { SCOPEBASE_URL: 'ftp://x' }), /^scopebase: SCOPEBASE_URL "ftp:\/\/x" is not an http\(s\) URL/);
  usage(await cli(['status', 'acme/web'], { SCOPEBASE_DATABASE: 'Bad' }), /^scopebase: SCOPEBASE_DATABASE "Bad" must match /);
  usage(await cli(['status'], { SCOPEBASE_REPO: 'acme/web/x' }), /^scopebase: SCOPEBASE_REPO "acme\/web\/x" is not org\/repo/);
  usage(await cli(['status', '--org', 'acme'], { SCOPEBASE_REPO: 'w@b' }), /^scopebase: SCOPEBASE_REPO "w@b" is not a repo name/);
  // Given on the command line, the option is named (it wins over the variable).
  usage(await cli(['status', 'acme/web', '--database', 'Bad'], { SCOPEBASE_DATABASE: 'good' }), /^scopebase: --database "Bad" must match /);

  // Empty (a `$(npx scopebase secret …)` that failed): unset, as the server reads its variables; it was "unexpected error".
  const empty = await cli(['status', 'acme/web', '--json'], { SCOPEBASE_SECRET: '', SCOPEBASE_URL: '', SCOPEBASE_DATABASE: '' });
  assert.equal(empty.code, 0, empty.stderr);
  assert.equal(JSON.parse(empty.stdout).database, 'main');
  usage(await cli(['status', 'acme/web', '--secret', '']), /^scopebase: --secret is empty: pass the repo's secret \(`npx scopebase secret acme\/web` prints it/);

  const stale = await cli(['status', 'acme/web'], { SCOPEBASE_SECRET: 'sb_stale_value' });
  assert.equal(stale.code, 1, stale.stderr);
  oneLine(stale, new RegExp(`^scopebase: the server at http://127\\.0\\.0\\.1:${port()} refused the secret in SCOPEBASE_SECRET for acme/web: set SCOPEBASE_SECRET to "\\$\\(npx scopebase secret acme/web\\)" run where the server runs, or unset it to derive the secret here`));
  assert.doesNotMatch(stale.stderr, /sb_stale_value/);
  const viaUrl = await cli(['status', 'acme/web'], { SCOPEBASE_URL: p.url, SCOPEBASE_SECRET: 'sb_stale_value' });
  oneLine(viaUrl, /refused the secret in SCOPEBASE_SECRET .*another server: set SCOPEBASE_URL to its URL, or pass --url$/);

  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const dead = `http://127.0.0.1:${(closed.address() as { port: number }).port}`;
  await new Promise((r) => closed.close(r));
  const down = await cli(['status', 'acme/web'], { SCOPEBASE_URL: dead });
  assert.equal(down.code, 3);
  oneLine(down, /^scopebase: cannot reach SCOPEBASE_URL http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): .*; a server on another port: set SCOPEBASE_URL to its URL, or pass --url$/);
});

test('exit 1 when the server says no, 3 when it cannot be reached, 78 for configuration; each one line saying what to do', async () => {
  const sql = await cli(['query', 'acme/web', 'SELECT * FROM nowhere']);
  assert.equal(sql.code, 1);
  oneLine(sql, /acme\/web at http:\/\/127\.0\.0\.1:\d+: 400 sql_error: no such table: nowhere \(request [\w-]+\)/);
  const write = await cli(['query', 'acme/web', 'DELETE FROM todos']);
  assert.equal(write.code, 1);
  oneLine(write, /read_only: .*; writes go through `scopebase execute`\n?$/);
  const two = await cli(['execute', 'acme/web', 'INSERT INTO todos(title) VALUES (1); INSERT INTO todos(title) VALUES (2)']);
  oneLine(two, /more than one statement.*; several statements: `scopebase execute --file script\.sql`/);
  oneLine(await cli(['query', 'acme/web', '--database', 'nosuch', 'SELECT 1']), /database_not_found: .*; `scopebase execute` or `scopebase migrate` with this --database creates it\n?$/);
  const wrongSecret = await cli(['status', 'acme/web', '--secret', 'wrong']);
  assert.equal(wrongSecret.code, 1);
  oneLine(wrongSecret, new RegExp(`^scopebase: the server at http://127\\.0\\.0\\.1:${port()} refused the --secret given for acme/web: pass --secret .*another server: export its PORT here, or pass --url$`));
  assert.doesNotMatch(wrongSecret.stderr, /wrong/);

  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const deadPort = String((closed.address() as { port: number }).port);
  await new Promise((r) => closed.close(r));
  const down = await cli(['status', 'acme/web', '--url', `http://127.0.0.1:${deadPort}`]);
  assert.equal(down.code, 3);
  oneLine(down, /cannot reach http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\): is scopebase running\? Start it with `npx scopebase start`; a server on another port: export its PORT here, or pass --url/);
  const downViaPort = await cli(['query', 'acme/web', 'SELECT 1'], { PORT: deadPort });
  assert.equal(downViaPort.code, 3);
  const silent = createServer((socket) => socket.on('data', () => {})); // accepts, never answers
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  try {
    const slow = await cli(['status', 'acme/web', '--url', `http://127.0.0.1:${(silent.address() as { port: number }).port}`, '--timeout', '300']);
    assert.equal(slow.code, 3);
    oneLine(slow, /did not answer in time/);
  } finally {
    await new Promise((r) => silent.close(r));
  }

  const noKey = await cli(['status', 'acme/web'], { RUNTIME_ROOT_KEY: '', DATA_DIR: join(work, 'empty') });
  assert.equal(noKey.code, 78);
  oneLine(noKey, /no secret for acme\/web: pass --secret/);
  const badPort = await cli(['status', 'acme/web'], { PORT: 'http' });
  assert.equal(badPort.code, 78);
  oneLine(badPort, /PORT: must be a port number/);
  const devKey = join(work, 'dev-data');
  mkdirSync(devKey, { recursive: true });
  writeFileSync(join(devKey, 'runtime-root.key'), ROOT_KEY + '\n');
  const fromDataDir = await cli(['status', 'acme/web'], { RUNTIME_ROOT_KEY: '', DATA_DIR: devKey });
  assert.equal(fromDataDir.code, 0, `the development key in DATA_DIR gives the secret: ${fromDataDir.stderr}`);
  assert.equal(readFileSync(join(devKey, 'runtime-root.key'), 'utf8').trim(), ROOT_KEY);
});

test('logs: JSON lines for collectors; one readable line each with LOG_FORMAT=pretty (the default on a terminal)', async () => {
  const dataDir = tempDir();
  try {
    for (const format of ['json', 'pretty']) {
      const child = spawn(process.execPath, ['src/cli/main.ts', 'start'], { env: { ...process.env, DATA_DIR: dataDir, PORT: '0', ADMIN_PORT: '0', LOG_LEVEL: 'info', LOG_FORMAT: format }, stdio: ['ignore', 'pipe', 'ignore'] });
      let stdout = '';
      child.stdout.on('data', (d) => (stdout += d));
      const closed = new Promise((r) => child.on('close', r));
      for (let i = 0; i < 300 && !/Server listening/.test(stdout); i++) await new Promise((r) => setTimeout(r, 100));
      child.kill('SIGTERM');
      await closed;
      const line = stdout.split('\n').find((l) => l.includes('Server listening'))!;
      if (format === 'json') assert.equal(JSON.parse(line).msg.startsWith('Server listening'), true);
      else assert.match(line, /^\[\d\d:\d\d:\d\d\] INFO: Server listening at http:\/\/127\.0\.0\.1:\d+/);
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('output piped into a reader that stops early (`| head`) ends quietly, without a stack trace', async () => {
  const env = { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, PORT: port(), BASE_DOMAIN: 'localhost', DATA_DIR: join(work, 'no-data') };
  const child = spawn(process.execPath, ['src/cli/main.ts', 'execute', 'acme/web', 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 50000) SELECT x, x * 2 FROM c'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  child.stdout.once('data', () => child.stdout.destroy()); // as `head -1` does once it has its line
  const code = await new Promise((resolve) => child.on('close', resolve));
  assert.doesNotMatch(stderr, /EPIPE|\n\s+at /, stderr);
  assert.equal(code, 0);
});
