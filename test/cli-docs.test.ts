// docs/cli.md's reference is the CLI's own --help output, for the program and for every command it lists, and the
// failures it shows are what the CLI prints.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { runCli } from './helpers/cli.ts';
import { freePort } from './helpers/ports.ts';
import { ROOT_KEY, startProduct, tempDir } from './helpers/product.ts';

const run = promisify(execFile);
const help = async (args: string[]) => (await run(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, COLUMNS: '' } })).stdout;

test('docs/cli.md holds the current --help of scopebase and of every command', async () => {
  const doc = readFileSync('docs/cli.md', 'utf8');
  const blocks = new Map([...doc.matchAll(/^### (.+)\n\n```text\n([\s\S]*?)```$/gm)].map((m) => [m[1]!, m[2]!]));
  const top = await help(['--help']);
  assert.equal(blocks.get('scopebase --help'), top, 'docs/cli.md: update the "scopebase --help" block to the output of `scopebase --help`');
  const commands = [...top.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
  for (const c of commands) {
    const own = await help([c, '--help']);
    assert.equal(blocks.get(c), own, `docs/cli.md: update the "${c}" block to the output of \`scopebase ${c} --help\``);
    // A group's subcommands (cluster move) are commands a reader looks up too.
    const subs = [...(own.split(/^Commands:\n/m)[1] ?? '').matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((s) => s !== 'help');
    for (const s of subs) assert.equal(blocks.get(`${c} ${s}`), await help([c, s, '--help']), `docs/cli.md: add or update a "${c} ${s}" block with the output of \`scopebase ${c} ${s} --help\``);
  }
});

test('`help <command> <subcommand>` prints what `<command> <subcommand> --help` prints (it printed the group\'s help)', async () => {
  assert.equal(await help(['help', 'cluster', 'move']), await help(['cluster', 'move', '--help']));
  assert.match(await help(['help', 'cluster', 'move']), /^Usage: scopebase cluster move /);
  assert.equal(await help(['help', 'restore-db']), await help(['restore-db', '--help']));
});

test('each failure docs/cli.md shows is, word for word, what the CLI prints in that case (one drifted unseen)', async () => {
  const doc = readFileSync('docs/cli.md', 'utf8');
  const shown = /for example:\n\n```\n([\s\S]*?)```/.exec(doc)![1]!.trimEnd().split('\n');
  const json = /and `message` is the line:\n\n```json\n(.*)\n```/.exec(doc)![1]!;
  const p = await startProduct();
  const work = tempDir('scopebase-cli-docs-');
  try {
    const port = new URL(p.url).port;
    const dead = String(await freePort());
    const file = join(work, 'a-file');
    writeFileSync(file, '');
    const missing = join(work, 'missing');
    const env = { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SCOPEBASE_'))), RUNTIME_ROOT_KEY: ROOT_KEY, PORT: port, DATA_DIR: join(work, 'data') };
    // Each shown line, by what starts it: the command that meets it here.
    const cases: [string, string[], Record<string, string>][] = [
      ['cannot reach', ['query', 'acme/web', 'SELECT 1'], { PORT: dead }],
      ['refused the secret for', ['query', 'acme/web', 'SELECT 1'], { RUNTIME_ROOT_KEY: 'c'.repeat(64) }],
      ['refused the secret in SCOPEBASE_SECRET', ['query', 'acme/web', 'SELECT 1'], { SCOPEBASE_SECRET: 'stale' }],
      ['sql_error', ['query', 'acme/web', 'SELECT * FROM nope'], {}],
      ['PORT: port', ['start'], { ADMIN_PORT: String(await freePort()), DATA_DIR: join(work, 'start') }],
      ['is a file', ['start'], { DATA_DIR: file }],
      ['cannot write --output', ['export', 'acme/web', '--output', join(missing, 'x.db')], {}],
      ['unknown option', ['query', '--bogus'], {}],
    ];
    assert.equal((await runCli(['execute', 'acme/web', 'CREATE TABLE t(x)'], env)).code, 0, 'the database exists: the SQL error is the one shown');
    assert.equal(shown.length, cases.length, 'docs/cli.md: every failure shown has a case here');
    for (const line of shown) {
      const c = cases.find(([key]) => line.includes(key));
      assert.ok(c, `docs/cli.md shows a failure this test does not know: ${line}`);
      const r = await runCli(c[1], { ...env, ...c[2] });
      const printed = r.stderr.trimEnd()
        .replaceAll(`:${port}`, ':8080').replaceAll(`:${dead}`, ':8080').replaceAll(`port ${port} `, 'port 8080 ')
        .replaceAll(file, '/srv/data').replaceAll(missing, '/backups').replace(/\(request [\w-]+\)/, '(request 0c5e…)');
      assert.equal(printed, line, `docs/cli.md: update the failure shown to what \`scopebase ${c[1].join(' ')}\` prints`);
    }
    const r = await runCli(['query', 'acme/web', 'SELECT * FROM nope', '--json'], env);
    assert.equal(r.stdout.trimEnd().replace(/"requestId":"[\w-]+"/, '"requestId":"0c5e…"'), json, 'docs/cli.md: the --json failure');
  } finally {
    await p.close();
    rmSync(work, { recursive: true, force: true });
  }
});
