// `scopebase history` and `restore-db`: time travel (SPEC 4.11) over the HTTP API; the versions to pick from are
// the change log's events (SPEC 4.9), one per version.
import type { Command } from 'commander';
import { GoneError, type ChangeEvent, type Status } from '../client/index.ts';
import { addTargetOptions, attempt, connect, type Target, type TargetOptions } from './target.ts';
import { CliError, count, EXIT, printJson, shellWord, table, usageError } from './output.ts';
import { historyLine } from './database.ts';
import { isIsoTime, MAX_CHANGES_PAGE } from '../db/request.ts';

type RestoreOptions = TargetOptions & { toVersion?: string; toTime?: string; dryRun?: boolean };

function restoreTarget(opts: RestoreOptions): { toVersion: number } | { toTime: string } {
  if ((opts.toVersion === undefined) === (opts.toTime === undefined)) throw usageError('give one of --to-version <n> or --to-time <time> (RFC 3339 with a UTC offset, e.g. 2026-11-22T10:00:00Z, or unix seconds)');
  if (opts.toVersion !== undefined) {
    if (!/^\d+$/.test(opts.toVersion)) throw usageError(`--to-version must be a version number, got ${opts.toVersion}`);
    return { toVersion: Number(opts.toVersion) };
  }
  // Unix seconds, as wrangler d1 time-travel takes them, are sent as the ISO time they name.
  if (/^\d{1,12}(\.\d{1,3})?$/.test(opts.toTime!)) return { toTime: new Date(Math.round(Number(opts.toTime) * 1000)).toISOString() };
  return { toTime: rfc3339Time('--to-time', opts.toTime!) };
}

/**
 * A time argument as the server's rule reads it (a time it cannot read is a usage error, 2, as a bad --to-version
 * is). RFC 3339 5.6 lets a space stand for the `T` (`date --rfc-3339=seconds` prints one): it is sent as `T`. A time
 * without a UTC offset names a different instant in each zone, so it is refused, saying so.
 */
function rfc3339Time(flag: string, raw: string): string {
  const t = raw.replace(/^(\d{4}-\d{2}-\d{2}) (?=\d)/, '$1T');
  if (isIsoTime(t)) return t;
  if (isIsoTime(`${t}Z`)) throw usageError(`${flag} ${raw} has no UTC offset, so it is a different instant in each time zone: add Z for UTC or the offset, e.g. ${t}Z or ${t}+01:00`);
  throw usageError(`${flag} must be an RFC 3339 (ISO 8601) time with a UTC offset naming a real date and time, such as 2026-11-22T10:00:00Z or 2026-11-22 11:00:00+01:00, or unix seconds; got ${raw}`);
}

type HistoryOptions = TargetOptions & { limit?: string; before?: string };

/** One listed version: its event without the changeset and the migrations' SQL (ids only). */
interface VersionEntry {
  version: number; committedAt: string; operation: ChangeEvent['operation']; rowsAffected: number; tables: string[];
  migrations?: string[]; baselined?: string[]; restoredVersion?: number; restorable: boolean;
}

interface HistoryPage {
  status: Status; versions: VersionEntry[];
  /** The `--before` of the next, older page; null when this one reached the first version or the log's oldest. */
  next: { before: number } | null;
  /** The oldest version the change log still holds, when the page stopped there (older ones are no longer listed). */
  changeLogFrom: number | null;
}

function wholeNumber(flag: string, raw: string | undefined, min: number, max: number): number | undefined {
  if (raw === undefined) return undefined;
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) throw usageError(`${flag} must be a whole number from ${min} to ${max}, got ${raw}`);
  return Number(raw);
}

/** The versions below `before` (all: the current one included), newest first, at most `limit`, read from /_db/changes. */
async function versionsPage(t: Target, before: number | undefined, limit: number): Promise<HistoryPage> {
  const status = await attempt(t, () => t.client.status());
  if (!status.exists) {
    const others = status.databases.length ? ` (the repo's databases: ${status.databases.join(', ')})` : '';
    throw new CliError(EXIT.refused, `${t.org}/${t.repo} has no database ${t.database} yet${others}: execute, migrate or import creates it`, { error: { code: 'database_not_found', message: `database ${t.database} does not exist` } });
  }
  const top = Math.min(before === undefined ? status.version! : before - 1, status.version!);
  let since = Math.max(0, top - limit);
  let changeLogFrom: number | null = null;
  const events: ChangeEvent[] = [];
  while (since < top) {
    const from = since;
    const page = await attempt(t, () => t.client.changes(from, { limit: top - from }).catch((e: unknown) => {
      // Older than the log keeps (SPEC 4.9: 1,000 events or 7 days at least): list from its oldest.
      const oldest = e instanceof GoneError ? e.details?.oldestVersion : undefined;
      if (typeof oldest === 'number' && oldest - 1 > from) return { gone: oldest };
      throw e;
    }));
    if ('gone' in page) {
      changeLogFrom = page.gone;
      since = page.gone - 1;
      continue;
    }
    const mine = page.events.filter((e) => e.version <= top);
    events.push(...mine);
    if (mine.length === 0) break;
    since = mine.at(-1)!.version; // a page ends sooner past its byte limit: go on from its last
  }
  const oldestRestorable = status.history?.oldestVersion ?? null;
  const versions = events.reverse().map((e): VersionEntry => ({
    version: e.version, committedAt: e.committedAt, operation: e.operation, rowsAffected: e.changes.rowsAffected, tables: e.changes.tables,
    ...(e.migrations ? { migrations: e.migrations.map((m) => m.id) } : {}), ...(e.baselined?.length ? { baselined: e.baselined } : {}),
    ...(e.restoredVersion !== undefined ? { restoredVersion: e.restoredVersion } : {}),
    restorable: oldestRestorable !== null && e.version >= oldestRestorable,
  }));
  const lowest = versions.at(-1)?.version ?? top + 1;
  const next = changeLogFrom === null && lowest > 1 ? { before: lowest } : null;
  return { status, versions, next, changeLogFrom };
}

/** What made a version, for a person: the operation, and a restore's target. */
const madeBy = (v: VersionEntry) => (v.operation === 'restore' && v.restoredVersion !== undefined ? `restore to ${v.restoredVersion}` : v.operation);

/** A list of names, the first few of it: an import's event names every table. */
const few = (names: string[], n = 3) => (names.length > n ? `${names.slice(0, n).join(', ')} +${names.length - n} more` : names.join(', '));

function printHistory(t: Target, p: HistoryPage, limit: number): void {
  const s = p.status;
  process.stdout.write(`${t.org}/${t.repo}/${t.database}: version ${s.version}\n${historyLine(s) ?? ''}\n`);
  if (p.versions.length > 0) {
    const rows = p.versions.map((v) => [v.version, v.committedAt, madeBy(v), v.rowsAffected, few(v.tables), [...(v.baselined ?? []).map((id) => `${id} (baseline)`), ...(v.migrations ?? [])].join(', ')]);
    process.stdout.write('\n' + table(['version', 'committed at', 'made by', 'rows', 'tables', 'migrations'], rows));
  }
  const oldest = s.history?.oldestVersion ?? null;
  const notes = [count(p.versions.length, 'version')];
  if (s.history && oldest !== null && p.versions.some((v) => !v.restorable)) notes.push(`those before ${oldest} are no longer restorable`);
  if (p.changeLogFrom !== null) notes.push(`versions before ${p.changeLogFrom} are no longer in the change log`);
  const database = t.database === 'main' ? '' : ` --database ${t.database}`;
  if (p.next) notes.push(`older: scopebase history ${shellWord(`${t.org}/${t.repo}`)}${database} --before ${p.next.before}${limit === 20 ? '' : ` --limit ${limit}`}`);
  process.stderr.write(`(${notes.join('; ')})\n`);
}

export function addHistoryCommands(program: Command): void {
  addTargetOptions(program.command('history')
    .description("list a repo's database's versions, newest first: when each was committed, what made it (execute, migrate, restore, import) and the migrations it applied; to pick restore-db's --to-version")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .option('--limit <n>', `how many versions to list (1 to ${MAX_CHANGES_PAGE}, default 20)`)
    .option('--before <version>', 'list the versions before this one (the next, older page: the last line says it)')
    .addHelpText('after', `
Versions come from the change log, which keeps at least the last 1,000 or 7 days of them; restore-db reaches those
that status's "history: restorable from version N" line allows (DB_HISTORY_DAYS).

Examples:
  scopebase history acme/web
  scopebase history acme/web --before 41 --limit 50
  scopebase history acme/web --database analytics --json`))
    .action(async (repo: string | undefined, opts: HistoryOptions) => {
      const limit = wholeNumber('--limit', opts.limit, 1, MAX_CHANGES_PAGE) ?? 20;
      const before = wholeNumber('--before', opts.before, 1, Number.MAX_SAFE_INTEGER);
      const t = connect(opts, repo);
      const p = await versionsPage(t, before, limit);
      if (!t.json) return printHistory(t, p, limit);
      printJson({ database: t.database, version: p.status.version, history: p.status.history ?? null, versions: p.versions, next: p.next, changeLogFrom: p.changeLogFrom });
    });

  addTargetOptions(program.command('restore-db')
    .description("bring a repo's database back to what it held at a version or a time (a new version; mirrors follow)")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .option('--to-version <n>', 'the version to restore')
    .option('--to-time <time>', 'restore the version in force at this RFC 3339 time with a UTC offset, e.g. 2026-11-22T10:00:00Z or 2026-11-22 11:00:00+01:00 (as date --rfc-3339=seconds prints), or unix seconds (1795687200)')
    .option('--dry-run', 'say which version it would restore, change nothing')
    .addHelpText('after', `
Examples:
  scopebase history acme/web                    # the versions, newest first, with their time and what made them
  scopebase status acme/web                     # "history: restorable from version 12" shows how far back
  scopebase restore-db acme/web --to-version 41 --dry-run
  scopebase restore-db acme/web --to-time 2026-11-22T10:00:00Z`))
    .action(async (repo: string | undefined, opts: RestoreOptions) => {
      const to = restoreTarget(opts);
      const t = connect(opts, repo);
      // The applied migrations before and after: a restore past a migration undoes it, and the next migrate runs it again.
      const before = opts.dryRun || t.json ? undefined : (await t.client.status().catch(() => undefined))?.migrations;
      const r = await attempt(t, () => t.client.restore(to, { dryRun: opts.dryRun === true }));
      if (t.json) return printJson(r);
      const when = r.restoredTo.committedAt ? ` (committed ${r.restoredTo.committedAt})` : '';
      process.stdout.write(r.dryRun
        ? `would restore ${t.org}/${t.repo}/${t.database} to version ${r.restoredTo.version}${when}; it is at version ${r.version} (dry run: nothing changed)\n`
        : r.restoredTo.version === r.version
          ? `${t.org}/${t.repo}/${t.database} is at version ${r.version}${when} already: nothing changed\n`
          : `restored ${t.org}/${t.repo}/${t.database} to version ${r.restoredTo.version}${when}, as version ${r.version}\n`);
      const after = before && r.version !== r.restoredTo.version ? (await t.client.status().catch(() => undefined))?.migrations : undefined;
      if (before && after && after.applied < before.applied) {
        const undone = before.applied - after.applied;
        process.stdout.write(`migrations: ${after.applied} applied now${after.latest ? `, latest ${after.latest}` : ''}; undone ${undone}${undone > 1 ? `, up to ${before.latest}; the next migrate applies them` : `: ${before.latest}; the next migrate applies it`} again (fix or remove a bad one's file first)\n`);
      }
    });
}
