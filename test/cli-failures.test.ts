// SPEC 10's failures, from a black-box probe: a file-system error on a path the user gave or on DATA_DIR, and a bad
// BASE_DOMAIN, are each one line with the right exit code, never "unexpected error".
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
