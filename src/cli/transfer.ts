// `scopebase export` and `scopebase import`: a database to a file and back (SPEC 4.12) over the HTTP API.
import { readFileSync, writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { addTargetOptions, attempt, connect, type TargetOptions } from './target.ts';
import { printJson, usageError } from './output.ts';
import { REPO_PATH } from './database.ts';

type ImportOptions = TargetOptions & { mode?: string; format?: string };
type ExportOptions = TargetOptions & { format?: string; output?: string };

/** A SQLite database file starts with these 16 bytes; anything else is taken for SQL text. */
const SQLITE_HEADER = Buffer.from('SQLite format 3\0', 'latin1');

const size = (n: number) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`);

export function addTransferCommands(program: Command): void {
  addTargetOptions(program.command('export')
    .description("write a consistent copy of a repo's database: a clean SQLite file or a SQL dump (sqlite3 .dump style)")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .option('--format <format>', 'sqlite or sql', 'sqlite')
    .option('--output <file>', 'write to this file (default: standard output)')
    .addHelpText('after', `
Examples:
  scopebase export acme/web --format sql > dump.sql
  scopebase export acme/web --database analytics --output analytics.sqlite`))
    .action(async (repo: string | undefined, opts: ExportOptions) => {
      if (opts.format !== 'sqlite' && opts.format !== 'sql') throw usageError('--format must be sqlite or sql');
      if (opts.format === 'sqlite' && opts.output === undefined && process.stdout.isTTY) throw usageError('a SQLite file is binary: give --output <file> or redirect standard output');
      const t = connect(opts, repo);
      const r = await attempt(t, () => t.client.export({ format: opts.format as 'sqlite' | 'sql', timeoutMs: 600_000 }));
      if (opts.output !== undefined) writeFileSync(opts.output, r.bytes);
      else process.stdout.write(r.bytes);
      const what = `exported ${t.org}/${t.repo}/${t.database} at version ${r.version} (${opts.format}, ${size(r.bytes.length)})${opts.output ? ` to ${opts.output}` : ''}`;
      if (t.json) process.stderr.write(`${JSON.stringify({ version: r.version, bytes: r.bytes.length, format: opts.format })}\n`);
      else process.stderr.write(`${what}\n`);
    });

  addTargetOptions(program.command('import')
    .description('make a SQLite file or a SQL dump the content of a database, in one step (all or nothing)')
    .usage('[options] [org/repo] <file>')
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .argument('[file]', 'a SQLite database file or SQL text (- for standard input)')
    .option('--mode <mode>', 'create (the database must not exist) or replace', 'create')
    .option('--format <format>', 'sqlite or sql (default: told from the file)')
    .addHelpText('after', `
Examples:
  scopebase import acme/web dump.sql --database restored
  scopebase import acme/web app.db --mode replace`))
    .action(async (first: string | undefined, second: string | undefined, opts: ImportOptions) => {
      const [repo, file] = second !== undefined ? [first, second] : first !== undefined && REPO_PATH.test(first) ? [first, undefined] : [undefined, first];
      if (file === undefined) throw usageError('give the file to import: scopebase import acme/web dump.sql');
      if (opts.mode !== 'create' && opts.mode !== 'replace') throw usageError('--mode must be create or replace');
      if (opts.format !== undefined && opts.format !== 'sqlite' && opts.format !== 'sql') throw usageError('--format must be sqlite or sql');
      let data: Buffer;
      try {
        data = readFileSync(file === '-' ? 0 : file);
      } catch (e) {
        throw usageError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
      }
      const format = (opts.format as 'sqlite' | 'sql' | undefined) ?? (data.subarray(0, 16).equals(SQLITE_HEADER) ? 'sqlite' : 'sql');
      const t = connect(opts, repo);
      // An upload has no progress on this path yet: at least say what is under way when it is big.
      if (data.length > 8 << 20 && !t.json) process.stderr.write(`sending ${size(data.length)} ...\n`);
      const r = await attempt(t, () => t.client.import(data, { format, mode: opts.mode as 'create' | 'replace', timeoutMs: 600_000 }));
      if (t.json) return printJson(r);
      const rows = r.tables.reduce((n, x) => n + x.rows, 0);
      process.stdout.write(`imported ${file} (${format}) into ${t.org}/${t.repo}/${r.database}: ${r.tables.length} tables, ${rows} rows, version ${r.version}\n`);
    });
}
