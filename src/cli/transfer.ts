// `scopebase export` and `scopebase import`: a database to a file and back (SPEC 4.12) over the HTTP API.
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { backup, DatabaseSync } from 'node:sqlite';
import type { Command } from 'commander';
import { addTargetOptions, attempt, connect, type Target, type TargetOptions } from './target.ts';
import { CliError, count, EXIT, printJson, usageError } from './output.ts';
import { checkInputFile, checkOutputFile, describeIoError, ioFailure } from './files.ts';
import { REPO_PATH } from './database.ts';
import { byteProgress } from './progress.ts';
import { formatOf, type TableEntry } from '../client/index.ts';

type ImportOptions = TargetOptions & { mode?: string; format?: string };
type ExportOptions = TargetOptions & { format?: string; output?: string };

const size = (n: number) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`);

/**
 * A WAL-mode SQLite file whose `-wal` beside it holds commits (D1's under .wrangler/state, an app still running or
 * not closed cleanly): the file alone lacks them, and imported as an empty or old database. It is read through
 * SQLite (file and -wal) into a copy, which is imported instead; undefined when the file holds everything.
 */
async function walCopy(file: string): Promise<{ path: string; remove: () => void } | undefined> {
  const wal = statSync(`${file}-wal`, { throwIfNoEntry: false });
  if (!wal?.isFile() || wal.size === 0) return undefined;
  const head = Buffer.alloc(20);
  const fd = openSync(file, 'r');
  try {
    readSync(fd, head, 0, 20, 0);
  } finally {
    closeSync(fd);
  }
  if (formatOf(head) !== 'sqlite' || head[18] !== 2) return undefined; // not WAL mode: SQLite itself ignores a -wal
  const dir = mkdtempSync(join(tmpdir(), 'scopebase-import-'));
  const remove = () => rmSync(dir, { recursive: true, force: true });
  const copy = join(dir, basename(file));
  try {
    const db = new DatabaseSync(file, { readOnly: true });
    try {
      await backup(db, copy);
    } finally {
      db.close();
    }
  } catch (e) {
    remove();
    throw new CliError(EXIT.usage, `cannot read ${file} with the commits in its -wal: ${describeIoError(e, file)}; stop the app that uses it, then fold them in with sqlite3 ${file} 'PRAGMA wal_checkpoint(TRUNCATE)' and import again`);
  }
  process.stderr.write(`${file} is in WAL mode and ${basename(file)}-wal beside it holds ${size(wal.size)} of commits not yet in it: importing a copy read through SQLite, with them\n`);
  return { path: copy, remove };
}

/** That tool's record is stale once `scopebase migrate` ran migrations (it writes only its own): said, not assumed. */
const SAME_TOOL = (tool: string) => `if ${tool} applied every migration the content holds (scopebase migrate does not write that table), record them without running them`;

/** The `--baseline` that a D1 or drizzle database's own record of its migrations names (docs/backups.md, "Which id"). */
async function knownBaseline(t: Target, tables: TableEntry[]): Promise<string | undefined> {
  if (tables.some((x) => x.name === 'd1_migrations')) {
    const last = (await t.client.query('SELECT name FROM d1_migrations ORDER BY id DESC LIMIT 1').catch(() => undefined))?.values[0]?.[0];
    if (typeof last === 'string') return `its d1_migrations table (wrangler's) ends at ${last}: ${SAME_TOOL('wrangler')}: scopebase migrate <dir> --baseline ${last} --dry-run, then without --dry-run`;
  }
  const n = tables.find((x) => x.name === '__drizzle_migrations')?.rows;
  if (typeof n === 'number' && n > 0) {
    return `its __drizzle_migrations table (drizzle-kit's) records ${n} applied: ${SAME_TOOL('drizzle-kit')}: scopebase migrate <dir> --baseline <file ${n} of the folder: drizzle-kit numbers from 0000, so ${String(n - 1).padStart(4, '0')}_…> --dry-run, then without --dry-run`;
  }
  return undefined;
}

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
  scopebase import acme/web app.db --mode replace
  scopebase import dump.sql acme/web            # the file first, as migrate takes its folder, works too`))
    .action(async (first: string | undefined, second: string | undefined, opts: ImportOptions) => {
      let [repo, file] = second !== undefined ? [first, second] : first !== undefined && REPO_PATH.test(first) ? [first, undefined] : [undefined, first];
      // `import dump.sql acme/web`, in the order `migrate ./migrations acme/web` takes (it was "dump.sql is not org/repo").
      if (second !== undefined && REPO_PATH.test(second) && !existsSync(second) && (first === '-' || !REPO_PATH.test(first!) || existsSync(first!))) [repo, file] = [second, first];
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
        const copy = format === 'sql' ? undefined : await walCopy(file);
        const progress = byteProgress('importing', t.json);
        try {
          r = await attempt(t, () => t.client.importFile(copy?.path ?? file, { ...(format ? { format } : {}), mode, timeoutMs: 600_000, onProgress: progress.update }));
        } finally {
          progress.stop();
          copy?.remove();
        }
      }
      if (t.json) return printJson({ database: r.database, version: r.version, tables: r.tables });
      const rows = r.tables.reduce((n, x) => n + (x.rows ?? 0), 0);
      process.stdout.write(`imported ${file} (${r.format}) into ${t.org}/${t.repo}/${r.database}: ${count(r.tables.length, 'table')}, ${count(rows, 'row')}, version ${r.version}\n`);
      // Said nowhere before: the next `migrate` then failed on "table … already exists" with no hint why.
      const known = await knownBaseline(t, r.tables);
      process.stderr.write(`migrations: none recorded (an import empties that list); ${known ?? 'if the imported content already holds your migrations, record them without running them: scopebase migrate <dir> --baseline <id of the last one it holds>'} (docs/backups.md)\n`);
    });
}
