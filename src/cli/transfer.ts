// `scopebase export` and `scopebase import`: a database to a file and back (SPEC 4.12) over the HTTP API.
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { addTargetOptions, attempt, connect, type TargetOptions } from './target.ts';
import { CliError, count, printJson, usageError } from './output.ts';
import { checkInputFile, checkOutputFile, ioFailure } from './files.ts';
import { REPO_PATH } from './database.ts';
import { byteProgress } from './progress.ts';
import { formatOf } from '../client/index.ts';

type ImportOptions = TargetOptions & { mode?: string; format?: string };
type ExportOptions = TargetOptions & { format?: string; output?: string };

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
      if (opts.output !== undefined) checkOutputFile(opts.output, '--output'); // before the server makes the export
      const t = connect(opts, repo);
      const format = opts.format as 'sqlite' | 'sql';
      let r: { size: number; version: number; lastMigration?: string };
      if (opts.output !== undefined) {
        // Into a file: streamed, with a progress bar on a terminal.
        const output = opts.output;
        const progress = byteProgress('exporting', t.json);
        try {
          r = await attempt(t, () => t.client.exportToFile(output, { format, timeoutMs: 600_000, onProgress: progress.update }));
        } catch (e) {
          if (e instanceof CliError || (e as NodeJS.ErrnoException).syscall === undefined) throw e;
          throw ioFailure(e, 'export', output); // the file, not the server: e.g. the disk filled while writing
        } finally {
          progress.stop();
        }
      } else {
        const got = await attempt(t, () => t.client.export({ format, timeoutMs: 600_000 }));
        process.stdout.write(got.bytes);
        r = { size: got.bytes.length, version: got.version, ...(got.lastMigration ? { lastMigration: got.lastMigration } : {}) };
      }
      const what = `exported ${t.org}/${t.repo}/${t.database} at version ${r.version} (${opts.format}, ${size(r.size)})${opts.output ? ` to ${opts.output}` : ''}`;
      const summary = { version: r.version, bytes: r.size, format: opts.format, lastMigration: r.lastMigration ?? null };
      // Without --output, standard output is the export itself: the summary goes beside it, on stderr.
      if (t.json && opts.output !== undefined) printJson(summary);
      else process.stderr.write(t.json ? `${JSON.stringify(summary)}\n` : `${what}\n`);
      // The copy holds no applied-migration list (an import starts with none): the one step that carries it over.
      if (!t.json && r.lastMigration) process.stderr.write(`migrations: applied up to ${r.lastMigration}; after importing this copy, record them without running them: scopebase migrate <dir> --baseline ${r.lastMigration}\n`);
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
      const t = connect(opts, repo);
      const format = opts.format as 'sqlite' | 'sql' | undefined;
      const mode = opts.mode as 'create' | 'replace';
      let r;
      if (file === '-') {
        const data = readFileSync(0);
        const told = format ?? formatOf(data);
        r = { ...await attempt(t, () => t.client.import(data, { format: told, mode, timeoutMs: 600_000 })), format: told };
      } else {
        // From a file: streamed, with a progress bar on a terminal.
        checkInputFile(file, 'the file to import');
        const progress = byteProgress('importing', t.json);
        try {
          r = await attempt(t, () => t.client.importFile(file, { ...(format ? { format } : {}), mode, timeoutMs: 600_000, onProgress: progress.update }));
        } finally {
          progress.stop();
        }
      }
      if (t.json) return printJson({ database: r.database, version: r.version, tables: r.tables });
      const rows = r.tables.reduce((n, x) => n + x.rows, 0);
      process.stdout.write(`imported ${file} (${r.format}) into ${t.org}/${t.repo}/${r.database}: ${count(r.tables.length, 'table')}, ${count(rows, 'row')}, version ${r.version}\n`);
      // Said nowhere before: the next `migrate` then failed on "table … already exists" with no hint why.
      process.stderr.write('migrations: none recorded (an import empties that list); if the imported content already holds your migrations, record them without running them: scopebase migrate <dir> --baseline <id of the last one it holds> (docs/backups.md)\n');
    });
}
