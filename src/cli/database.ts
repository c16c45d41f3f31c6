// `scopebase query|execute|status`: SQL against a repo's database over the HTTP API (SPEC 4.3, 4.4, 4.7).
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import type { Params, ResultSet, Status, TableEntry, WriteResult } from '../client/index.ts';
import { splitStatements } from '../db/statement-end.ts';
import { addTargetOptions, attempt, connect, type Target, type TargetOptions } from './target.ts';
import { count, printJson, table, usageError, wireValue } from './output.ts';
import { unreadable } from './files.ts';

type SqlOptions = TargetOptions & { params?: string; file?: string };

/** What a positional `org/repo` looks like (no SQL or folder name a user types reads like this). */
export const REPO_PATH = /^[a-z0-9][a-z0-9-]*\/[a-z0-9][a-z0-9._-]*$/i;

/** `[org/repo] [sql]`: one positional is the SQL, unless it can only be a repo (no SQL reads `acme/web`). */
function repoAndSql(first: string | undefined, second: string | undefined): { repo?: string; sql?: string } {
  if (second !== undefined) return { repo: first, sql: second };
  return first !== undefined && REPO_PATH.test(first) ? { repo: first } : { sql: first };
}

export function parseParams(raw: string | undefined): Params | undefined {
  if (raw === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    throw usageError(`--params is not JSON: give an array such as '[1, "x"]' or an object such as '{"id": 1}'`);
  }
  if (value === null || typeof value !== 'object') throw usageError('--params must be a JSON array (for ?) or object (for :name)');
  return value as Params; // SPEC 4.2's {"$bigint"}/{"$blob"} pass through as they are
}

export function resultJson(r: Partial<WriteResult>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (r.rowsAffected !== undefined) Object.assign(out, { rowsAffected: r.rowsAffected, lastInsertRowid: wireValue(r.lastInsertRowid ?? null) });
  if (r.columns && (r.columns.length > 0 || r.rowsAffected === undefined)) Object.assign(out, { columns: r.columns, rows: (r.values ?? []).map((row) => row.map(wireValue)) });
  return out;
}

export function printRows(r: ResultSet): void {
  process.stdout.write(table(r.columns, r.values));
  process.stderr.write(`(${count(r.values.length, 'row')})\n`);
}

export function printWrite(r: WriteResult): void {
  if (r.columns.length > 0) printRows(r);
  const rowid = r.lastInsertRowid === null ? '' : `, last insert rowid ${r.lastInsertRowid}`;
  process.stdout.write(`${count(r.rowsAffected, 'row')} affected${rowid}\n`);
}

async function runQuery(t: Target, sql: string, params: Params | undefined): Promise<void> {
  const r = await attempt(t, () => t.client.query(sql, params));
  if (t.json) printJson({ ...resultJson(r), version: r.version });
  else printRows(r);
}

async function runExecute(t: Target, statements: string[], params: Params | undefined): Promise<void> {
  const r = await attempt(t, () => t.client.batch(statements.map((sql) => (params === undefined ? { sql } : { sql, params }))));
  if (t.json) return printJson({ results: r.results.map(resultJson), version: r.version });
  for (const one of r.results) printWrite(one);
  process.stderr.write(`version ${r.version}\n`);
}

function readSqlFile(file: string): string[] {
  let text: string;
  try {
    text = readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (e) {
    throw unreadable(e, '--file', file === '-' ? 'standard input' : file);
  }
  const { statements, rest } = splitStatements(text);
  if (rest) statements.push(rest);
  if (statements.length === 0) throw usageError(`--file ${file} holds no SQL statement`);
  return statements;
}

/** status's tables as rows of `table name | rows`: a virtual one marked, a count SQLite could not make said so (not NULL). */
export function tableRows(tables: TableEntry[]): [string, number | string][] {
  return tables.map((t) => [t.virtual ? `${t.name} (virtual${t.module ? `: ${t.module}` : ''})` : t.name, t.rows ?? 'unreadable']);
}

/** status's `history:` line (what restore-db can reach), also printed by `scopebase history`; null for a database not made yet. */
export function historyLine(s: Status): string | null {
  if (s.history) return `history: ${s.history.oldestVersion === null ? 'none kept now (none yet, or dropped for the repo\'s cap while idle; it begins with the next write)' : `restorable from version ${s.history.oldestVersion} (${s.history.oldestTime})`}`;
  return s.exists ? 'history: off (the server keeps none: DB_HISTORY_DAYS=0, the default on cluster nodes); restore-db has nothing to go back to' : null;
}

function printStatus(s: Status): void {
  const lines = [`database ${s.database}: ${s.exists ? `version ${s.version}, ${s.sizeBytes} bytes` : 'does not exist yet (execute, migrate or import creates it)'}`];
  if (s.migrations) lines.push(`migrations: ${s.migrations.applied} applied${s.migrations.latest ? `, latest ${s.migrations.latest}` : ''}`);
  const history = historyLine(s);
  if (history) lines.push(history);
  if (s.databases) lines.push(`databases: ${s.databases.join(', ') || '(none)'}`);
  process.stdout.write(lines.join('\n') + '\n');
  if (s.tables && s.tables.length > 0) {
    process.stdout.write('\n' + table(['table', 'rows'], tableRows(s.tables)));
    if (s.tables.some((t) => t.rows === null)) process.stdout.write('(unreadable: SQLite could not count its rows, e.g. a full-text table whose content= table is gone)\n');
  }
  if (s.mirrors && s.mirrors.length > 0) {
    process.stdout.write('\n' + table(['mirror', 'delivered', 'pending', 'last error'], s.mirrors.map((m) => [m.name, m.deliveredVersion, m.pendingEvents, m.lastError ?? '-'])));
  }
}

export function addDatabaseCommands(program: Command): void {
  addTargetOptions(program.command('query')
    .description("run one read-only statement (SELECT ...) against a repo's database and print its rows as a table")
    .usage('[options] [org/repo] <sql>')
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .argument('[sql]', 'the SQL (required), e.g. "SELECT * FROM todos WHERE id = ?"')
    .option('--params <json>', 'parameters: a JSON array for ? or an object for :name')
    .addHelpText('after', `
Examples:
  scopebase query acme/web "SELECT * FROM todos"
  scopebase query --url http://acme.localhost:8080/web "SELECT * FROM todos WHERE id = ?" --params '[1]'
  scopebase query acme/web "SELECT count(*) AS n FROM todos" --json`))
    .action(async (first: string | undefined, second: string | undefined, opts: SqlOptions) => {
      const { repo, sql } = repoAndSql(first, second);
      if (sql === undefined) throw usageError('give the SQL: scopebase query acme/web "SELECT ..."');
      const params = parseParams(opts.params);
      await runQuery(connect(opts, repo), sql, params);
    });

  addTargetOptions(program.command('execute')
    .description("run writes against a repo's database as one transaction: one statement, or every statement of --file")
    .usage('[options] [org/repo] <sql> | --file <file>')
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .argument('[sql]', 'the SQL, e.g. "INSERT INTO todos(title) VALUES (?)"')
    .option('--file <file>', 'read the statements from a file (- for standard input); all commit or none do')
    .option('--params <json>', 'parameters: a JSON array for ? or an object for :name')
    .addHelpText('after', `
Examples:
  scopebase execute acme/web "INSERT INTO todos(title) VALUES (?)" --params '["write docs"]'
  scopebase execute acme/web --file seed.sql`))
    .action(async (first: string | undefined, second: string | undefined, opts: SqlOptions) => {
      const { repo, sql } = repoAndSql(first, second);
      if ((sql === undefined) === (opts.file === undefined)) throw usageError('give the SQL as an argument or --file, one of them');
      const statements = opts.file !== undefined ? readSqlFile(opts.file) : [sql!];
      const params = parseParams(opts.params);
      if (params !== undefined && statements.length > 1) throw usageError(`--params applies to one statement; --file holds ${statements.length}`);
      await runExecute(connect(opts, repo), statements, params);
    });

  addTargetOptions(program.command('status')
    .description("show a repo's database: version, size, tables with row counts, migrations, mirrors, and the repo's databases")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .addHelpText('after', `
Examples:
  scopebase status acme/web
  scopebase status --org acme --repo web --database analytics --json`))
    .action(async (repo: string | undefined, opts: TargetOptions) => {
      const t = connect(opts, repo);
      const s = await attempt(t, () => t.client.status());
      if (t.json) printJson(s);
      else printStatus(s);
    });
}
