// `scopebase restore-db`: time travel (SPEC 4.11) over the HTTP API.
import type { Command } from 'commander';
import { addTargetOptions, attempt, connect, type TargetOptions } from './target.ts';
import { printJson, usageError } from './output.ts';
import { isIsoTime } from '../db/request.ts';

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

export function addHistoryCommands(program: Command): void {
  addTargetOptions(program.command('restore-db')
    .description("bring a repo's database back to what it held at a version or a time (a new version; mirrors follow)")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .option('--to-version <n>', 'the version to restore')
    .option('--to-time <time>', 'restore the version in force at this RFC 3339 time with a UTC offset, e.g. 2026-11-22T10:00:00Z or 2026-11-22 11:00:00+01:00 (as date --rfc-3339=seconds prints), or unix seconds (1795687200)')
    .option('--dry-run', 'say which version it would restore, change nothing')
    .addHelpText('after', `
Examples:
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
