// SPEC 10 from the outside: every command that talks to a running instance takes the repo in each of the forms SPEC
// names (--org/--repo, --repo org/repo, a positional org/repo, the org from a *.localhost host in --url), --database
// and an explicit --secret; --params as an array or an object; --json on every command that prints a result. The
// `scopebase` command as a subprocess.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ENCRYPTION_KEY, type Product } from './helpers/product.ts';
import { cliForFile, failedInOneLine, oneLine } from './helpers/cli.ts';
import { signInUser } from './helpers/session.ts';

let p: Product;
const { cli, work, port } = cliForFile('scopebase-spec10-', async (product) => {
  p = product;
  assert.equal((await p.db('web', 'execute', { database: 'notes', sql: 'CREATE TABLE n(body TEXT)' })).status, 200);
});

/** The repo acme/web in each form SPEC 10 names. */
const forms = (): string[][] => [
  ['--org', 'acme', '--repo', 'web'],
  ['--repo', 'acme/web'],
  ['acme/web'],
  ['--url', `http://acme.localhost:${port()}`, '--repo', 'web'],
];

test('status, query and execute take the repo in every form, with --database', async () => {
  for (const repo of forms()) {
    const status = await cli(['status', ...repo, '--database', 'notes', '--json']);
    assert.equal(status.code, 0, `${repo.join(' ')}: ${status.stderr}`);
    assert.equal(JSON.parse(status.stdout).database, 'notes');
    const wrote = await cli(['execute', ...repo, '--database', 'notes', 'INSERT INTO n VALUES (?)', '--params', JSON.stringify([repo.join(' ')]), '--json']);
    assert.equal(wrote.code, 0, `${repo.join(' ')}: ${wrote.stderr}`);
    const read = await cli(['query', ...repo, '--database', 'notes', 'SELECT count(*) AS c FROM n WHERE body = :b', '--params', JSON.stringify({ b: repo.join(' ') }), '--json']);
    assert.equal(read.code, 0, `${repo.join(' ')}: ${read.stderr}`);
    assert.deepEqual(JSON.parse(read.stdout).rows, [[1]]);
  }
});

test('migrate, export, import and restore-db take the repo in the other forms too; --secret is used as given', async () => {
  const dir = join(work, 'migrations');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, '0010_later.sql'), 'INSERT INTO m VALUES (2);\n');
  writeFileSync(join(dir, '0002_first.sql'), 'CREATE TABLE m(x);\n');
  const [orgRepo, slash, , viaUrl] = forms();
  const migrated = await cli(['migrate', dir, ...orgRepo!, '--database', 'mig', '--json']);
  assert.equal(migrated.code, 0, migrated.stderr);
  assert.deepEqual(JSON.parse(migrated.stdout).applied, ['0002_first', '0010_later'], 'in file-name order');
  const out = join(work, 'mig.sql');
  const exported = await cli(['export', ...slash!, '--database', 'mig', '--format', 'sql', '--output', out]);
  assert.equal(exported.code, 0, exported.stderr);
  const imported = await cli(['import', out, ...viaUrl!, '--database', 'copy']);
  assert.equal(imported.code, 0, imported.stderr);
  const restored = await cli(['restore-db', ...viaUrl!, '--database', 'mig', '--to-version', '1', '--dry-run', '--json']);
  assert.equal(restored.code, 0, restored.stderr);
  assert.equal(JSON.parse(restored.stdout).restoredTo.version, 1);
  const withSecret = await cli(['query', 'acme/web', '--database', 'copy', 'SELECT x FROM m', '--secret', p.secret('acme', 'web'), '--json'], { RUNTIME_ROOT_KEY: '' });
  assert.equal(withSecret.code, 0, withSecret.stderr);
  assert.deepEqual(JSON.parse(withSecret.stdout).rows, [[2]]);
  const wrongSecret = await cli(['query', 'acme/web', 'SELECT 1', '--secret', p.secret('acme', 'other')]);
  assert.equal(wrongSecret.code, 1, 'the server said no');
  assert.equal(wrongSecret.stderr.trim().split('\n').length, 1, wrongSecret.stderr);
});

test('the positional org/repo may come after the SQL or the file, as before it (it was refused as naming no repo)', async () => {
  const wrote = await cli(['execute', 'INSERT INTO n VALUES (\'after\')', 'acme/web', '--database', 'notes', '--json']);
  assert.equal(wrote.code, 0, wrote.stderr);
  assert.equal(JSON.parse(wrote.stdout).results[0].rowsAffected, 1);
  const read = await cli(['query', "SELECT count(*) FROM n WHERE body = 'after'", 'acme/web', '--database', 'notes', '--json']);
  assert.equal(read.code, 0, read.stderr);
  assert.deepEqual(JSON.parse(read.stdout).rows, [[1]]);
  const dump = join(work, 'after.sql');
  writeFileSync(dump, "CREATE TABLE a(x);\nINSERT INTO a VALUES ('file first');\n");
  const imported = await cli(['import', dump, 'acme/web', '--database', 'after', '--json']);
  assert.equal(imported.code, 0, imported.stderr);
  assert.deepEqual(JSON.parse((await cli(['query', 'acme/web', 'SELECT x FROM a', '--database', 'after', '--json'])).stdout).rows, [['file first']]);
});

test('secret takes the repo in the forms the other commands take, and --json; rotate-keys takes --json (both were usage errors)', async () => {
  const want = { org: 'acme', repo: 'web', secret: p.secret('acme', 'web') };
  for (const repo of [['acme/web'], ['--repo', 'acme/web'], ['--org', 'acme', '--repo', 'web'], ['--org', 'ACME', 'web']]) {
    const printed = await cli(['secret', ...repo, '--json']);
    assert.equal(printed.code, 0, `${repo.join(' ')}: ${printed.stderr}`);
    assert.deepEqual(JSON.parse(printed.stdout), want, repo.join(' '));
    assert.equal((await cli(['secret', ...repo])).stdout, `${want.secret}\n`, repo.join(' '));
  }
  const disagree = await cli(['secret', '--org', 'other', '--repo', 'acme/web', '--json']);
  assert.equal(disagree.code, 2, disagree.stderr);
  assert.equal(JSON.parse(disagree.stdout).error.code, 'usage');

  const { userId } = await signInUser(p, 'acme', 'rotator');
  const put = await p.call(`/web/_account/credentials/gh/token?user=${userId}`, { method: 'PUT', body: { value: 'v' }, headers: { authorization: `Bearer ${want.secret}` } });
  assert.equal(put.status, 201, put.text);
  const newKey = 'c'.repeat(64);
  const rotated = await cli(['rotate-keys', '--json'], { DATA_DIR: p.dataDir, ACCOUNT_ENCRYPTION_KEYS: `${newKey},${ENCRYPTION_KEY}` });
  assert.equal(rotated.code, 0, rotated.stderr);
  assert.deepEqual(JSON.parse(rotated.stdout), { resealed: 1, current: 0, gone: 0, failed: 0, total: 1 });
});

test('a positional org/repo and a --repo that name different repos are a usage error (the --repo was ignored in silence)', async () => {
  for (const cmd of [['query', 'acme/web', 'SELECT 1', '--database', 'notes'], ['status', 'acme/web'], ['secret', 'acme/web']]) {
    const refused = await cli([...cmd, '--repo', 'acme/api', '--json']);
    assert.equal(refused.code, 2, `${cmd[0]}: ${refused.stderr}`);
    assert.equal(JSON.parse(refused.stdout).error.code, 'usage');
    assert.match(refused.stderr, /acme\/web and --repo acme\/api name different repos: give the repo once/);
    const agreeing = await cli([...cmd, '--repo', 'web', '--json']);
    assert.equal(agreeing.code, 0, `${cmd[0]}: ${agreeing.stderr}`);
  }
  const fromEnv = await cli(['query', 'acme/web', 'SELECT 1', '--database', 'notes', '--json'], { SCOPEBASE_REPO: 'acme/api' });
  assert.equal(fromEnv.code, 0, `SCOPEBASE_REPO is a default a positional overrides: ${fromEnv.stderr}`);
});

test('a migrate that fails prints one line, as every ordinary failure (its notes on skipped and read files came first)', async () => {
  const dir = join(work, 'failing');
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'README.md'), 'not a migration');
  writeFileSync(join(dir, '0001_ok.sql'), 'CREATE TABLE ok(x);\n');
  writeFileSync(join(dir, '0002_bad.sql'), 'CREATE TABL bad(x);\n');
  failedInOneLine(await cli(['migrate', dir, 'acme/web', '--database', 'failing']), /^scopebase: .*400 sql_error: 0002_bad\.sql: near "TABL": syntax error/);
  const unreachable = await cli(['migrate', dir, 'acme/web', '--url', 'http://127.0.0.1:1']);
  assert.equal(unreachable.code, 3);
  oneLine(unreachable, /^scopebase: cannot reach http:\/\/127\.0\.0\.1:1/);
  const none = join(work, 'no-migrations');
  mkdirSync(none, { recursive: true });
  writeFileSync(join(none, 'notes.md'), 'x');
  const empty = await cli(['migrate', none, 'acme/web']);
  assert.equal(empty.code, 2);
  oneLine(empty, /^scopebase: no migration files in .*: name them NNNN_name\.sql \(e\.g\. 0001_init\.sql\); skipped notes\.md: not a \.sql file$/);
  writeFileSync(join(dir, '0002_bad.sql'), 'CREATE TABLE bad(x);\n');
  const ok = await cli(['migrate', dir, 'acme/web', '--database', 'failing']);
  assert.equal(ok.code, 0, ok.stderr);
  assert.equal(ok.stderr, `skipped README.md: not a .sql file\nread 2 migration files from ${dir}\n`, 'named once it went through');
});
