// The change feed of the delivery thread: reads each database's change log (_scopebase_changes, written by the
// executor in the write's own transaction) straight from its file over a read-only connection. Only our own fixed
// statements run here, never user SQL, so a read cannot run away; WAL readers never block the writers.
import { statSync } from 'node:fs';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { ChangeEvent, ChangeFeed, Scope } from '../../db/contract.ts';
import { Layout } from '../../db/layout.ts';
import { ApiError } from '../../shared/errors.ts';
import { openSqlite } from '../../shared/sqlite-open.ts';
import { keepBody } from './sender.ts';

/** Connections kept open (one per database with events in flight; ~100-200 KB each). */
const MAX_OPEN = 32;
/** A connection unused this long is closed. */
const IDLE_CLOSE_MS = 30_000;

interface FileId {
  dev: number;
  ino: number;
  /** Inode numbers are reused after a delete; the birth time tells the files apart (0 where unsupported). */
  birthtimeMs: number;
}

const sameFile = (a: FileId, b: FileId) => a.dev === b.dev && a.ino === b.ino && a.birthtimeMs === b.birthtimeMs;

interface Reader {
  db: DatabaseSync;
  /** The file the connection opened: a database deleted and made again under the same name is another file. */
  file: FileId;
  version: StatementSync;
  oldest: StatementSync;
  events: StatementSync;
  usedAt: number;
}

export class ChangeLogFiles implements ChangeFeed {
  private readonly layout: Layout;
  private readonly readers = new Map<string, Reader>();
  private readonly listeners: ((scope: Scope, version: number) => void)[] = [];
  private readonly sweeper: NodeJS.Timeout;

  /** `dbRoot` is the db service's DATA_DIR/db. */
  constructor(dbRoot: string) {
    this.layout = new Layout(dbRoot);
    this.sweeper = setInterval(() => this.closeIdle(), IDLE_CLOSE_MS / 2);
    this.sweeper.unref();
  }

  /** Passes on a commit hint from the db service. */
  hint(scope: Scope, version: number): void {
    for (const l of this.listeners) l(scope, version);
  }

  onCommit(listener: (scope: Scope, version: number) => void): void {
    this.listeners.push(listener);
  }

  async readChanges(scope: Scope, since: number, limit: number): Promise<{ events: ChangeEvent[]; version: number }> {
    const path = this.layout.path(scope);
    const r = this.reader(path, scope);
    if (r === null) return { events: [], version: 0 };
    try {
      // One read transaction: the version and the events come from one snapshot, and only committed writes are seen.
      r.db.exec('BEGIN');
      try {
        const version = Number((r.version.get() as { value: number | bigint } | undefined)?.value ?? 0);
        const oldest = (r.oldest.get() as { v: number | bigint | null }).v;
        const firstKept = oldest === null ? version + 1 : Number(oldest);
        // The same rule as POST /_db/changes (src/db/executor/read-ops.ts).
        if (since < version && since < firstKept - 1) {
          throw new ApiError('gone', `events after version ${since} are no longer kept; the oldest kept is ${firstKept}`, { oldestVersion: firstKept, version });
        }
        const rows = r.events.all(since, limit) as { event: string }[];
        return { events: rows.map((row) => keepBody(JSON.parse(row.event) as ChangeEvent, row.event)), version };
      } finally {
        r.db.exec('COMMIT');
      }
    } catch (e) {
      if (!(e instanceof ApiError)) this.drop(path); // a fresh connection next time
      throw e;
    }
  }

  async currentVersion(scope: Scope): Promise<number | null> {
    const path = this.layout.path(scope);
    if (!this.readers.has(path)) {
      // The recovery scan visits every database once: read it without keeping a connection.
      if (!statSync(path, { throwIfNoEntry: false })) return null;
      const once = tryOpen(path, (db) => db);
      if (once === null) return 0;
      try {
        return readVersion(once);
      } finally {
        once.close();
      }
    }
    try {
      return (await this.readChanges(scope, Number.MAX_SAFE_INTEGER, 1)).version;
    } catch (e) {
      if (e instanceof ApiError && e.code === 'database_not_found') return null;
      throw e;
    }
  }

  listDatabases(): AsyncIterable<Scope> {
    return this.layout.all();
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const path of [...this.readers.keys()]) this.drop(path);
  }

  /** The open connection for `path`, reopened when the file was replaced; null while the database has no tables yet. */
  private reader(path: string, scope: Scope): Reader | null {
    const file = statSync(path, { throwIfNoEntry: false });
    if (!file) {
      this.drop(path);
      throw new ApiError('database_not_found', `database ${JSON.stringify(scope.database)} does not exist in ${scope.org}/${scope.repo}`);
    }
    let r = this.readers.get(path);
    if (r && !sameFile(r.file, file)) {
      this.drop(path);
      r = undefined;
    }
    if (!r) {
      const opened = openReader(path, file);
      if (opened === null) return null;
      if (this.readers.size >= MAX_OPEN) this.drop(this.readers.keys().next().value!);
      r = opened;
    } else this.readers.delete(path); // re-inserted below: the map's order is least recently used first
    this.readers.set(path, r);
    r.usedAt = performance.now();
    return r;
  }

  private drop(path: string): void {
    const r = this.readers.get(path);
    this.readers.delete(path);
    if (r?.db.isOpen) r.db.close();
  }

  private closeIdle(): void {
    const before = performance.now() - IDLE_CLOSE_MS;
    for (const [path, r] of this.readers) if (r.usedAt < before) this.drop(path);
  }
}

/** A read-only connection set up by `then`; null while the database has no internal tables yet. */
function tryOpen<T>(path: string, then: (db: DatabaseSync) => T): T | null {
  return openSqlite(path, { readOnly: true, timeout: 5000 }, (db) => {
    // The executor creates the file, then its internal tables: a database caught in between has nothing to deliver yet.
    if (db.prepare("SELECT count(*) AS n FROM sqlite_schema WHERE name IN ('_scopebase_meta', '_scopebase_changes')").get()!.n === 2) return then(db);
    db.close();
    return null;
  });
}

function readVersion(db: DatabaseSync): number {
  const row = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number | bigint } | undefined;
  return Number(row?.value ?? 0);
}

function openReader(path: string, file: FileId): Reader | null {
  return tryOpen(path, (db) => {
    // Delivery reads each event once, in order: a small page cache is enough.
    db.exec('PRAGMA cache_size = -256');
    return {
      db, file: { dev: file.dev, ino: file.ino, birthtimeMs: file.birthtimeMs }, usedAt: 0,
      version: db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'"),
      oldest: db.prepare('SELECT min(version) AS v FROM _scopebase_changes'),
      events: db.prepare('SELECT event FROM _scopebase_changes WHERE version > ? ORDER BY version LIMIT ?'),
    };
  });
}
