// `scopebase migrate <dir>`: sends a folder of NNNN_name.sql files (drizzle-kit / wrangler layout) in file-name
// order (SPEC 4.6), naming every file it will not use and why; `--dry-run` shows the SQL and applies nothing.
import { existsSync } from 'node:fs';
import { basename } from 'node:path';
import type { Command } from 'commander';
import { MigrationOrderError, readMigrationFolder, type MigrationFolder } from '../client/index.ts';
import { addTargetOptions, attempt, connect, type TargetOptions } from './target.ts';
import { CliError, count, EXIT, printJson, usageError } from './output.ts';
import { REPO_PATH } from './database.ts';
import { unreadable } from './files.ts';

async function readFolder(dir: string): Promise<MigrationFolder> {
  try {
    return await readMigrationFolder(dir);
  } catch (e) {
    if (e instanceof MigrationOrderError) throw usageError(e.message);
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw usageError(`no folder ${dir}: give the folder of NNNN_name.sql files, e.g. scopebase migrate ./migrations`);
    if (code === 'ENOTDIR') throw usageError(`${dir} is a file: give the folder that holds the NNNN_name.sql files`);
    throw unreadable(e, 'the migration folder', dir);
  }
}

/** An error about one migration (`details.migration`, or `details.id` for a conflict) names its file first. */
function namingFile(e: unknown, folder: MigrationFolder): unknown {
  const details = (e as { details?: { migration?: unknown; id?: unknown } }).details;
  const file = folder.migrations.find((m) => m.id === (details?.migration ?? details?.id))?.file;
  if (file && e instanceof Error) e.message = `${file}: ${e.message}`;
  return e;
}

/**
 * The first migration to run failing on "already exists" (or "duplicate column name") means the database holds what it makes: an import (which
 * records none), or a --baseline short of what the import brought. Said so, since the remedy is an option.
 */
function importHint(e: unknown, folder: MigrationFolder, dir: string, baseline: string | undefined): unknown {
  const err = e as { code?: unknown; details?: { migration?: unknown } };
  const first = folder.migrations[baseline === undefined ? 0 : folder.migrations.findIndex((m) => m.id === baseline) + 1];
  if (err.code !== 'sql_error' || first === undefined || err.details?.migration !== first.id || !(e instanceof Error) || !/already exists|duplicate column name/.test(e.message)) return e;
  e.message += baseline === undefined
    ? `; the database holds it already (an import?) with no migration recorded: record the ones it holds without running them, e.g. scopebase migrate ${dir} --baseline <the last one it holds> (docs/backups.md, "Keep migrating after an import")`
    : `; the database holds it already: give --baseline the last migration its content holds, a later one than ${baseline}`;
  return e;
}

/** `--baseline` as the folder names it: an id, or its file name (`0003_tags.sql`, a path to it). */
function baselineId(given: string, folder: MigrationFolder, dir: string): string {
  const m = folder.migrations.find((x) => x.id === given || x.file === given || x.file === basename(given));
  if (!m) throw usageError(`--baseline ${given} is not a migration of ${dir}: give the id (file name without .sql) of the last migration the database already holds, e.g. ${folder.migrations.at(-1)!.id}`);
  return m.id;
}

export function addMigrateCommand(program: Command): void {
  addTargetOptions(program.command('migrate')
    .description("apply a folder of NNNN_name.sql migration files (drizzle-kit / wrangler layout) in file-name order; each id is the file name without .sql; files it will not use are named with the reason; numbers of different widths that would run out of order (10_b before 9_a) are refused")
    .argument('<dir>', 'the folder, e.g. ./migrations')
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .option('--dry-run', 'show the SQL of the pending migrations and check them in a rolled-back transaction; changes nothing')
    .option('--baseline <id>', "record the migrations up to this one (its id or file name) as applied without running them, because the database's content already holds them (after an import); only on a database with none recorded; the later ones run")
    .addHelpText('after', `
Examples:
  scopebase migrate ./migrations acme/web --dry-run
  scopebase migrate ./migrations acme/web --baseline 0003_tags
  scopebase migrate ./drizzle --url http://acme.localhost:8080 --repo web`))
    .action(async (dir: string, repo: string | undefined, opts: TargetOptions & { dryRun?: boolean; baseline?: string }) => {
      if (repo !== undefined && REPO_PATH.test(dir) && !existsSync(dir)) [dir, repo] = [repo, dir]; // `migrate acme/web ./migrations`
      const folder = await readFolder(dir);
      const skipped = folder.skipped.map((s) => `skipped ${s.file}: ${s.reason}`);
      if (folder.migrations.length === 0) {
        throw new CliError(EXIT.usage, `no migration files in ${dir}: name them NNNN_name.sql (e.g. 0001_init.sql)${skipped.map((s) => `; ${s}`).join('')}`);
      }
      const baseline = opts.baseline === undefined ? undefined : baselineId(opts.baseline, folder, dir);
      const t = connect(opts, repo);
      const list = folder.migrations.map(({ id, sql }) => ({ id, sql }));
      const r = await attempt(t, () => t.client.migrate(list, { dryRun: opts.dryRun === true, ...(baseline ? { baseline } : {}) }).catch((e: unknown) => {
        throw namingFile(importHint(e, folder, dir, baseline), folder); // the server names the migration's id; a person looks for its file
      }));
      // Said once it went through: a failure is its one line (SPEC 10), not these notes above it.
      for (const line of [...skipped, `read ${count(folder.migrations.length, 'migration file')} from ${dir}`]) process.stderr.write(`${line}\n`);
      if (t.json) return printJson({ ...r, skipped: folder.skipped });
      if (r.dryRun) {
        for (const id of r.applied) {
          const m = folder.migrations.find((x) => x.id === id)!;
          process.stdout.write(`-- ${m.file}\n${m.sql.trimEnd()}\n\n`);
        }
      }
      if (r.baselined !== undefined) {
        const none = r.baselined.length === 0 ? ` (none: ${baseline} is recorded already)` : `: ${r.baselined.join(', ')}`;
        process.stdout.write(`${r.dryRun ? 'would record' : 'recorded'} as applied without running them ${r.baselined.length}${none}\n`);
      }
      const verb = r.dryRun ? 'would apply' : 'applied';
      process.stdout.write(`${verb} ${r.applied.length}: ${r.applied.join(', ') || '(none)'}; already applied ${r.alreadyApplied.length}; version ${r.version}\n`);
    });
}
