// Executor-side time travel and import (SPEC 4.11, 4.12): keeping history after each commit, restoring a version,
// importing a file. Both restore and import end as one ordinary write (install.ts), recorded in the change log
// with no changeset: followers take a snapshot.
import { DatabaseSync } from 'node:sqlite';
import { openSqlite } from '../../shared/sqlite-open.ts';
import { ApiError } from '../../shared/errors.ts';
import { firstOrphan, orphanError } from './foreign-keys.ts';
import { Archiver, historyDirOf } from '../history/archive.ts';
import { committedAtOf, index, oldest, oldestIn, rebuild, removeCopy, versionAt } from '../history/rebuild.ts';
import { assertNoInternalReference, INTERNAL_PREFIX } from '../sandbox.ts';
import { hasSecondStatement } from '../statement-end.ts';
import type { DbHandle, ExecutorLimits } from './handles.ts';
import { oneStatementOnly, replaceContent, withSource } from './install.ts';
import { loadSql } from './load-sql.ts';
import { failure, type Reply } from './reply.ts';
import { isSqliteError } from '../sqlite-errors.ts';
import { recordChange, type GroupContext } from './write-ops.ts';
import { tablesWithRows } from './read-ops.ts';

/** After a commit that moved the version: its page images go to the history. Never fails the write itself. */
export function keepHistory(h: DbHandle, prevVersion: number, version: number): void {
  if (!h.history || version === prevVersion) return;
  try {
    h.archiver ??= new Archiver(h.history, h.path);
    // The commit's time is the one its event tells (SPEC 5, /_db/changes): restore's committedAt and toTime agree with it.
    const committedAt = (v: number) => {
      const event = h.internal("SELECT json_extract(event, '$.committedAt') AS at FROM _scopebase_changes WHERE version = ?").get(v) as { at: string | null } | undefined;
      return event?.at ? Date.parse(event.at) : null;
    };
    h.archiver.record(prevVersion, version, committedAt(version) ?? Date.now(), () => committedAt(prevVersion));
  } catch (e) {
    h.archiver?.reset(); // the next commit starts a new segment: history stays exact, with a gap
    process.stderr.write(`${JSON.stringify({ level: 50, msg: 'history: a commit could not be recorded', error: String((e as Error).message).slice(0, 200) })}\n`);
  }
}

/** SPEC 4.11 status field: the oldest version history can rebuild; null with history off (it never begins). */
export function historyOf(h: DbHandle): { oldestVersion: number | null; oldestTime: string | null } | null {
  if (!h.history) return null;
  const o = oldestIn(historyDirOf(h.history, h.path));
  return { oldestVersion: o?.version ?? null, oldestTime: o ? new Date(o.time).toISOString() : null };
}

/** `copy`: where the version is rebuilt, named by the service, which removes it whatever becomes of this process. */
interface RestoreBody { toVersion?: number; toTime?: string; dryRun?: boolean; copy: string }

export function restore(h: DbHandle, body: RestoreBody, ctx: GroupContext): Reply {
  try {
    if (!h.history) throw new ApiError('invalid_request', 'history is off (DB_HISTORY_DAYS=0): there is nothing to restore from');
    const idx = index(historyDirOf(h.history, h.path));
    const current = h.version();
    const first = oldest(idx);
    const gone = () => new ApiError('gone', first
      ? `that is older than the history kept: the oldest restorable version is ${first.version} (${new Date(first.time).toISOString()})`
      : 'no history is kept for this database now (none yet, or the repo\'s history cap, DB_HISTORY_MAX_BYTES_PER_REPO, dropped it while the database was idle): it begins with the next write', { oldestVersion: first?.version ?? null, oldestTime: first ? new Date(first.time).toISOString() : null });
    let target: number;
    if (body.toVersion !== undefined) {
      target = body.toVersion;
      if (target > current) throw new ApiError('invalid_request', `version ${target} is not reached yet: the database is at version ${current}`, { version: current });
    } else {
      const time = Date.parse(body.toTime!);
      const at = versionAt(idx, time);
      // No record that early (none yet, or the cap took an idle database's): a time since its last commit is its version.
      const since = at ? null : loggedAt(h, current);
      if (!at && !(since && since.committedAt <= time)) throw gone();
      target = at ? at.version : current;
    }
    if (target === current) {
      // Restoring the version it is at changes nothing (SPEC 4.5): no new version, no event, no history record. Its
      // time is history's, else its event's (history begins anew after a backup is restored; the change log came with it).
      const at = committedAtOf(idx, target) ?? loggedAt(h, target);
      if (!at) throw gone();
      const restoredTo = { version: target, committedAt: new Date(at.committedAt).toISOString() };
      return { status: 200, body: JSON.stringify({ restoredTo, version: current, dryRun: body.dryRun === true }) };
    }
    if (!first || target < first.version) throw gone();
    const copy = body.copy;
    removeCopy(copy); // left by a process killed building it (the write is then run once more)
    try {
      const built = rebuild(idx, target, copy);
      if (!built) throw gone();
      const restoredTo = { version: target, committedAt: new Date(built.committedAt).toISOString() };
      if (body.dryRun) return { status: 200, body: JSON.stringify({ restoredTo, version: current, dryRun: true }) };
      const version = install(h, copy, ctx, { type: 'database.restored', operation: 'restore', restoredVersion: target });
      return { status: 200, body: JSON.stringify({ restoredTo, version, dryRun: false }), version };
    } finally {
      removeCopy(copy);
    }
  } catch (e) {
    return failure(e, null);
  }
}

/** When the change log says the version was committed, if it still holds its event. */
function loggedAt(h: DbHandle, version: number): { committedAt: number } | null {
  const row = h.internal('SELECT committed_at AS at FROM _scopebase_changes WHERE version = ?').get(version) as { at: number } | undefined;
  return row ? { committedAt: Number(row.at) } : null;
}

/** Replaces the content in one transaction, logs the event, keeps history. Returns the new version. */
function install(h: DbHandle, source: string, ctx: GroupContext, event: { type: string; operation: string; restoredVersion?: number }): number {
  h.internal('PRAGMA foreign_keys = OFF').run(); // tables are dropped and refilled in any order; checked before COMMIT
  try {
    return withSource(h, source, () => {
      h.internal('BEGIN IMMEDIATE').run();
      try {
        const prev = h.version();
        const { tables } = replaceContent(h);
        const orphan = firstOrphan(h);
        if (orphan) throw orphanError(orphan);
        recordChange(h, ctx, null, prev + 1, {
          type: event.type, operation: event.operation, changes: { rowsAffected: 0, tables: tables.sort() }, schemaChanged: true,
          ...(event.restoredVersion !== undefined ? { extra: { restoredVersion: event.restoredVersion } } : {}),
        });
        h.internal("INSERT OR REPLACE INTO _scopebase_meta (key, value) VALUES ('group', ?)").run(ctx.token);
        h.internal('COMMIT').run();
        keepHistory(h, prev, prev + 1);
        return prev + 1;
      } catch (e) {
        if (h.db.isTransaction) h.internal('ROLLBACK').run();
        throw e;
      }
    });
  } finally {
    h.internal('PRAGMA foreign_keys = ON').run();
  }
}

/** SQLite's refusal of a function a schema may not call under trusted_schema=OFF, as the caller's error. */
function unsafeUse(e: unknown, where: string): ApiError | null {
  const fn = /unsafe use of ([^\s()]+)\(\)/.exec(String((e as Error).message))?.[1];
  return fn === undefined ? null : new ApiError('not_allowed', `the file's schema calls ${fn}() in ${where}: a schema may only call functions safe to run for any user (SPEC 4.8)`);
}

/**
 * A file to import obeys the sandbox (SPEC 4.8): a sound SQLite file, no internal objects, no unsafe virtual tables,
 * and a schema that loads as the executor loads it (trusted_schema=OFF, defensive). Opened read-write, as install.ts
 * attaches it: read-only, SQLite skips CHECK constraints, and one calling load_extension() got past to a 500.
 */
function checkImport(source: string): void {
  let db: DatabaseSync;
  try {
    db = openSqlite(source, { defensive: true, allowExtension: false }, (d) => {
      d.exec('PRAGMA trusted_schema=OFF');
      d.prepare('SELECT count(*) FROM sqlite_schema').get(); // a file that is not a database, or whose schema does not load, fails here
      return d;
    });
  } catch (e) {
    const name = /malformed database schema \((.*?)\)/.exec(String((e as Error).message))?.[1];
    throw unsafeUse(e, name ?? 'its schema') ?? new ApiError('invalid_request', `the body is not a usable SQLite database file (${String((e as Error).message).slice(0, 120)})`);
  }
  try {
    const encoding = (db.prepare('PRAGMA encoding').get() as { encoding: string }).encoding;
    if (encoding !== 'UTF-8') throw new ApiError('invalid_request', `the file stores text as ${encoding}, and scopebase databases are UTF-8: import its SQL text instead (sqlite3 file .dump > dump.sql), which converts it`);
    const check = integrityProblems(db);
    if (check.length !== 1 || check[0] !== 'ok') throw new ApiError('invalid_request', `the file fails SQLite's integrity check: ${check.join('; ').slice(0, 300)}`);
    for (const o of db.prepare('SELECT type, name, tbl_name, sql FROM sqlite_schema').all() as { type: string; name: string; tbl_name: string; sql: string | null }[]) {
      for (const name of [o.name, o.tbl_name]) {
        if (name.toLowerCase().startsWith(INTERNAL_PREFIX)) throw new ApiError('not_allowed', `the file holds ${o.type} ${o.name}${name === o.name ? '' : ` on ${name}`}: the ${INTERNAL_PREFIX}* names are reserved`);
      }
      if (o.sql !== null && hasSecondStatement(o.sql)) throw oneStatementOnly();
      // Virtual tables' modules are checked where they are made, by the sandbox (install.ts): SQLite names the module.
      if (o.type === 'view') {
        try {
          db.prepare(`SELECT * FROM "${o.name.replaceAll('"', '""')}" LIMIT 0`); // a view's functions are checked when it is used
        } catch (e) {
          const unsafe = unsafeUse(e, `view ${o.name}`);
          if (unsafe) throw unsafe; // other errors (a table it names is missing) are SQLite's to report when it is read, as anywhere
        }
      }
    }
    assertNoInternalReference(db);
  } finally {
    db.close();
  }
  loadsAttached(source);
}

/** SQLITE_CORRUPT and SQLITE_NOTADB. */
const DAMAGED = new Set([11, 26]);

/**
 * SQLite's integrity check of an upload. A check SQLite cannot finish (a table whose root page is 0) fails it too:
 * thrown, it was answered 500 as if the repo's own database were damaged.
 */
function integrityProblems(db: DatabaseSync): string[] {
  try {
    return (db.prepare('PRAGMA integrity_check(20)').all() as { integrity_check: string }[]).map((r) => r.integrity_check);
  } catch (e) {
    if (!isSqliteError(e) || !DAMAGED.has(e.errcode & 0xff)) throw e; // the server's own trouble (memory, disk) stays its own
    return [String(e.message).slice(0, 200)];
  }
}

/**
 * The import attaches the file as `src`: a schema that loads alone may not load there (a view naming `main.t` means
 * the importing database then), and would fail as if the repo's own database were damaged (a 500).
 */
function loadsAttached(source: string): void {
  const db = new DatabaseSync(':memory:');
  try {
    db.exec('PRAGMA trusted_schema=OFF');
    db.prepare('ATTACH DATABASE ? AS src').run(source);
    db.prepare('SELECT count(*) FROM src.sqlite_schema').get();
  } catch (e) {
    const why = /malformed database schema \((.*?)\) - (.*)$/.exec(String((e as Error).message));
    throw new ApiError('invalid_request', `the file's schema does not load once attached for the import${why ? ` (${why[1]}: ${why[2]!.slice(0, 120)})` : ''}`);
  } finally {
    db.close();
  }
}

/** `scratch`: where SQL text is loaded, named by the service, which removes it whatever becomes of this process. */
interface ImportHeader { source: string; scratch: string; format: 'sqlite' | 'sql'; mode: 'create' | 'replace'; created: boolean; database: string }

export function importDatabase(h: DbHandle, head: ImportHeader, ctx: GroupContext, limits: ExecutorLimits, step: (done?: boolean) => void): Reply {
  const loaded = head.scratch;
  removeCopy(loaded); // left by a process killed loading it (the write is then run once more)
  try {
    if (head.mode === 'create' && !head.created) throw new ApiError('invalid_request', `database ${head.database} exists: import with mode=replace to overwrite it`);
    let source = head.source;
    if (head.format === 'sql') {
      loadSql(head.source, loaded, limits, step);
      source = loaded;
    } else {
      checkImport(source);
    }
    const version = install(h, source, ctx, { type: 'database.imported', operation: 'import' });
    h.sandbox.mode = 'internal';
    const tables = tablesWithRows(h);
    return { status: 200, body: JSON.stringify({ database: head.database, version, tables }), version };
  } catch (e) {
    return failure(e, null);
  } finally {
    removeCopy(loaded);
  }
}
