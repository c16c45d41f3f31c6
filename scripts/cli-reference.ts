// Rewrites the "## Reference" section of docs/cli.md from the CLI's own --help output (test/cli-docs.test.ts
// checks they agree). Run after adding or changing a command: `npm run docs:cli`.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const help = (args: string[]) => execFileSync(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, COLUMNS: '' }, encoding: 'utf8' });
const block = (title: string, text: string) => `### ${title}\n\n\`\`\`text\n${text}\`\`\`\n`;

const top = help(['--help']);
const commands = [...top.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
/** A command's block, then one per subcommand of a group (`cluster move`), as test/cli-docs.test.ts finds them. */
const blocks = (c: string) => {
  const own = help([c, '--help']);
  const subs = [...(own.split(/^Commands:\n/m)[1] ?? '').matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((s) => s !== 'help');
  return [block(c, own), ...subs.map((s) => block(`${c} ${s}`, help([c, s, '--help'])))];
};
const reference = ['## Reference\n', block('scopebase --help', top), ...commands.flatMap(blocks)].join('\n');
const doc = readFileSync('docs/cli.md', 'utf8');
const at = doc.indexOf('## Reference\n');
if (at < 0) throw new Error('docs/cli.md has no "## Reference" heading');
const next = doc.indexOf('\n## ', at + 1);
writeFileSync('docs/cli.md', doc.slice(0, at) + reference + (next < 0 ? '' : doc.slice(next)));
process.stdout.write(`docs/cli.md: reference for scopebase and ${commands.length} commands\n`);
