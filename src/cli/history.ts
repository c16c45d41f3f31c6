// `scopebase restore-db` and `scopebase import`: time travel (SPEC 4.11) and import (4.12) over the HTTP API.
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { addTargetOptions, attempt, connect, type TargetOptions } from './target.ts';
import { printJson, usageError } from './output.ts';
import { REPO_PATH } from './database.ts';

type RestoreOptions = TargetOptions & { toVersion?: string; toTime?: string; dryRun?: boolean };
type ImportOptions = TargetOptions & { mode?: string; format?: string };

/** A SQLite database file starts with these 16 bytes; anything else is taken for SQL text. */
const SQLITE_HEADER = Buffer.from('SQLite format 3\0', 'latin1');

function restoreTarget(opts: RestoreOptions): { toVersion: number } | { toTime: string } {
  if ((opts.toVersion === undefined) === (opts.toTime === undefined)) throw usageError('give one of --to-version <n> or --to-time <ISO time>');
  if (opts.toVersion !== undefined) {
    if (!/^\d+$/.test(opts.toVersion)) throw usageError(`--to-version must be a version number, got ${opts.toVersion}`);
    return { toVersion: Number(opts.toVersion) };
  }
  return { toTime: opts.toTime! };
}

export function addHistoryCommands(program: Command): void {
  addTargetOptions(program.command('restore-db')
    .description("bring a repo's database back to what it held at a version or a time (a new version; mirrors follow)")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .option('--to-version <n>', 'the version to restore')
    .option('--to-time <time>', 'restore the version in force at this ISO 8601 time, e.g. 2026-11-22T10:00:00Z')
    .option('--dry-run', 'say which version it would restore, change nothing')
    .addHelpText('after', `
Examples:
  scopebase status acme/web                     # "history: versions from 12" shows how far back
  scopebase restore-db acme/web --to-version 41 --dry-run
  scopebase restore-db acme/web --to-time 2026-11-22T10:00:00Z`))
    .action(async (repo: string | undefined, opts: RestoreOptions) => {
      const to = restoreTarget(opts);
      const t = connect(opts, repo);
      const r = await attempt(t, () => t.client.restore(to, { dryRun: opts.dryRun === true }));
      if (t.json) return printJson(r);
      const when = r.restoredTo.committedAt ? ` (committed ${r.restoredTo.committedAt})` : '';
      process.stdout.write(r.dryRun
        ? `would restore ${t.org}/${t.repo}/${t.database} to version ${r.restoredTo.version}${when}; it is at version ${r.version} (dry run: nothing changed)\n`
        : `restored ${t.org}/${t.repo}/${t.database} to version ${r.restoredTo.version}${when}, as version ${r.version}\n`);
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
      if (data.length > 8 << 20 && !t.json) process.stderr.write(`sending ${(data.length / 1048576).toFixed(1)} MiB ...\n`);
      const r = await attempt(t, () => t.client.import(data, { format, mode: opts.mode as 'create' | 'replace', timeoutMs: 600_000 }));
      if (t.json) return printJson(r);
      const rows = r.tables.reduce((n, x) => n + x.rows, 0);
      process.stdout.write(`imported ${file} (${format}) into ${t.org}/${t.repo}/${r.database}: ${r.tables.length} tables, ${rows} rows, version ${r.version}\n`);
    });
}
