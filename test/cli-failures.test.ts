// SPEC 10's failures, from a black-box probe: a file-system error on a path the user gave or on DATA_DIR, a bad
// BASE_DOMAIN and commander's usage errors are each one line with the right exit code, never "unexpected error";
// --json puts SPEC 3's {"error": …} on stdout for a failure.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { startProduct, tempDir, testEnv, ROOT_KEY, type Product } from './helpers/product.ts';
import { oneLine, runCli, type Run } from './helpers/cli.ts';

let p: Product;
const work = tempDir('scopebase-cli-failures-');
const aFile = join(work, 'a-file');

/** The CLI against the product under test. */
function cli(args: string[], env: Record<string, string | undefined> = {}): Promise<Run> {
  return runCli(args, { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, PORT: new URL(p.url).port, BASE_DOMAIN: 'localhost', DATA_DIR: p.dataDir, ...env });
}

function fails(r: Run, code: number, pattern: RegExp): void {
  assert.equal(r.code, code, r.stderr);
  oneLine(r, pattern);
  assert.doesNotMatch(r.stderr, /unexpected error/);
}

before(async () => {
  p = await startProduct();
  writeFileSync(aFile, 'not a folder');
  assert.equal((await cli(['execute', 'acme/web', 'CREATE TABLE t(x)', '--database', 'tt'])).code, 0);
});
after(async () => {
  await p.close();
  rmSync(work, { recursive: true, force: true });
});

test('export --output and import name the path that is wrong and exit 2, before the server is asked', async () => {
  const exp = (output: string) => cli(['export', 'acme/web', '--database', 'tt', '--output', output]);
  fails(await exp(join(work, 'nonexistent/dir/x.db')), 2, /^scopebase: cannot write --output .*nonexistent\/dir\/x\.db: there is no folder .*nonexistent\/dir: make it first$/);
  fails(await exp(work), 2, /^scopebase: cannot write --output .*: it is a folder: name a file in it$/);
  fails(await exp(join(aFile, 'x.db')), 2, /a-file is a file, not a folder$/);
  fails(await cli(['import', 'acme/web', work, '--database', 'new']), 2, /^scopebase: cannot read the file to import: .* is a folder: name a file$/);
  fails(await cli(['execute', 'acme/web', '--file', work]), 2, /^scopebase: cannot read --file: a folder where a file was meant: .* \(EISDIR\)$/);
});

test('DATA_DIR that is a file, or lies under one, is a configuration error naming DATA_DIR for every command that uses it', async () => {
  const empty = join(work, 'empty-data');
  mkdirSync(empty);
  const backup = join(work, 'empty-backup');
  assert.equal((await cli(['backup', backup], { DATA_DIR: empty })).code, 0);
  const commands = [['start'], ['serve', 'db'], ['secret', 'acme/web'], ['rotate-keys'], ['backup', join(work, 'never')], ['restore', backup], ['restore', backup, '--force'], ['status', 'acme/web']];
  for (const args of commands) {
    // No RUNTIME_ROOT_KEY: secret and status then look for the development key in DATA_DIR.
    const r = await cli(args, { ...testEnv(aFile), RUNTIME_ROOT_KEY: undefined });
    assert.equal(r.code, 78, `${args.join(' ')}: ${r.stderr}`);
    oneLine(r, /^scopebase: configuration error: DATA_DIR: .*a-file is a file, not a folder: set DATA_DIR to a folder/);
  }
  fails(await cli(['start'], testEnv(join(aFile, 'data'))), 78, /DATA_DIR: .*a-file\/data cannot be made: .*a-file is a file, not a folder$/);
  assert.equal(readFileSync(aFile, 'utf8'), 'not a folder');
});

test('BASE_DOMAIN that is no DNS name is a configuration error naming it, by the server\'s own rule', async () => {
  fails(await cli(['status', 'acme/web'], { BASE_DOMAIN: 'bad domain' }), 78, /^scopebase: configuration error: BASE_DOMAIN: must be a DNS name such as example\.com, got "bad domain"$/);
});

test('an unknown option or command, or a missing argument, is one line naming the help to read, exit 2', async () => {
  const cases: [string[], RegExp][] = [
    [['query', '--bogus'], /^scopebase: unknown option '--bogus' \(scopebase query --help for usage\)\n$/],
    [['query', '--parms', '[1]'], /^scopebase: unknown option '--parms' \(Did you mean --params\?\) \(scopebase query --help for usage\)\n$/],
    [['serve', 'bogus'], /^scopebase: command-argument value 'bogus' is invalid for argument 'part'\. Allowed choices are proxy, db, account, mirror\. \(scopebase serve --help for usage\)\n$/],
    [['backup'], /^scopebase: missing required argument 'dir' \(scopebase backup --help for usage\)\n$/],
    [['bogus'], /^scopebase: unknown command 'bogus' \(scopebase --help for usage\)\n$/],
    // `help <typo>` says so too, rather than the whole help with no word about the typo.
    [['help', 'expot'], /^scopebase: unknown command 'expot' \(Did you mean export\?\) \(scopebase --help for usage\)\n$/],
    [['help', 'cluster', 'mvoe'], /^scopebase: unknown command 'mvoe' \(Did you mean move\?\) \(scopebase cluster --help for usage\)\n$/],
    // A time the server could not read is the caller's usage error, as a bad --to-version is (it was the server's 400: exit 1).
    [['restore-db', 'acme/web', '--to-time', 'yesterday'], /^scopebase: --to-time must be an RFC 3339 \(ISO 8601\) time with a UTC offset .*; got yesterday\n$/],
    [['restore-db', 'acme/web', '--to-time', '2026-02-30T10:00:00Z'], /^scopebase: --to-time must be an RFC 3339/],
    [['restore-db', 'acme/web', '--to-time', '2026-02-30 10:00:00Z'], /^scopebase: --to-time must be an RFC 3339/],
    // No offset: a different instant in every zone, so refused rather than guessed (with a space or a T alike).
    [['restore-db', 'acme/web', '--to-time', '2026-11-26 10:00:00'], /^scopebase: --to-time 2026-11-26 10:00:00 has no UTC offset, .*add Z for UTC or the offset, e\.g\. 2026-11-26T10:00:00Z/],
    [['restore-db', 'acme/web', '--to-time', '2026-11-26T10:00:00'], /^scopebase: --to-time 2026-11-26T10:00:00 has no UTC offset/],
  ];
  for (const [args, pattern] of cases) {
    const r = await cli(args);
    assert.equal(r.code, 2, args.join(' '));
    assert.match(r.stderr, pattern);
  }
});

test('--json: a failure is SPEC 3\'s {"error"} on stdout (the server\'s own when it said no), the one line on stderr, and its exit code', async () => {
  const sql = await cli(['query', 'acme/web', 'SELECT * FROM nope', '--database', 'tt', '--json']);
  fails(sql, 1, /sql_error: no such table: nope/);
  const body = JSON.parse(sql.stdout);
  assert.deepEqual(body.error, { code: 'sql_error', message: 'no such table: nope', details: body.error.details });
  assert.match(body.requestId, /^[\w-]+$/);

  const usage = await cli(['query', 'acme/web', '--json']);
  fails(usage, 2, /give the SQL/);
  assert.deepEqual(JSON.parse(usage.stdout), { error: { code: 'usage', message: 'give the SQL: scopebase query acme/web "SELECT ..."' } });
  assert.equal(JSON.parse((await cli(['query', '--bogus', '--json'])).stdout).error.code, 'usage');

  const config = await cli(['status', 'acme/web', '--json'], { BASE_DOMAIN: 'bad domain' });
  assert.equal(config.code, 78);
  assert.equal(JSON.parse(config.stdout).error.code, 'configuration');

  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const dead = `http://127.0.0.1:${(closed.address() as { port: number }).port}`;
  await new Promise((r) => closed.close(r));
  const down = await cli(['status', 'acme/web', '--url', dead, '--json']);
  assert.equal(down.code, 3);
  assert.equal(JSON.parse(down.stdout).error.code, 'network');
  assert.equal((await cli(['status', 'acme/web', '--url', dead])).stdout, '', 'no JSON without --json');
});

test('export --output f --json prints its summary on stdout; without --output stdout is the export and the summary stays on stderr', async () => {
  const out = join(work, 'tt.sqlite');
  const r = await cli(['export', 'acme/web', '--database', 'tt', '--output', out, '--json']);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { version: 1, bytes: readFileSync(out).length, format: 'sqlite', lastMigration: null });
  assert.equal(r.stderr, '');
  const piped = await cli(['export', 'acme/web', '--database', 'tt', '--format', 'sql', '--json']);
  assert.match(piped.stdout, /^PRAGMA foreign_keys=OFF;|CREATE TABLE/m);
  assert.deepEqual(Object.keys(JSON.parse(piped.stderr)), ['version', 'bytes', 'format', 'lastMigration']);
});
