// docs/cli.md's reference is the CLI's own --help output, for the program and for every command it lists.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';

const run = promisify(execFile);
const help = async (args: string[]) => (await run(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, COLUMNS: '' } })).stdout;

test('docs/cli.md holds the current --help of scopebase and of every command', async () => {
  const doc = readFileSync('docs/cli.md', 'utf8');
  const blocks = new Map([...doc.matchAll(/^### (.+)\n\n```text\n([\s\S]*?)```$/gm)].map((m) => [m[1]!, m[2]!]));
  const top = await help(['--help']);
  assert.equal(blocks.get('scopebase --help'), top, 'docs/cli.md: update the "scopebase --help" block to the output of `scopebase --help`');
  const commands = [...top.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
  for (const c of commands) {
    assert.equal(blocks.get(c), await help([c, '--help']), `docs/cli.md: update the "${c}" block to the output of \`scopebase ${c} --help\``);
  }
});

test('`help <command> <subcommand>` prints what `<command> <subcommand> --help` prints (it printed the group\'s help)', async () => {
  assert.equal(await help(['help', 'cluster', 'move']), await help(['cluster', 'move', '--help']));
  assert.match(await help(['help', 'cluster', 'move']), /^Usage: scopebase cluster move /);
  assert.equal(await help(['help', 'restore-db']), await help(['restore-db', '--help']));
});
