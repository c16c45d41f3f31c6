// The delivery thread's own reads of each database's change log (_scopebase_changes, written by the executor in the
// write's own transaction), straight from its file over a read-only connection. Only our own fixed statements run
// here, never user SQL, so a read cannot run away; WAL readers never block the writers. What can take long is parsing
// the schema, whose size the tenant picks: SQLite parses it on a connection's first statement and after any DDL, and
// this thread serves every org. So before a read that would parse (the schema cookie, read without parsing, says so),
// the schema must be known to be small; otherwise the read is left to an executor (feed.ts, change-pages.ts).
import { statSync, type Stats } from 'node:fs';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import type { ChangeEvent, Scope } from '../../db/contract.ts';
import { Layout } from '../../db/layout.ts';
import { ApiError } from '../../shared/errors.ts';
import { openSqlite } from '../../shared/sqlite-open.ts';
import { keepBody } from './sender.ts';

/** Connections kept open (one per database with events in flight; ~100-200 KB each). */
const MAX_OPEN = 32;
/** A connection unused this long is closed. */
const IDLE_CLOSE_MS = 30_000;
/** A schema of at most this much SQL may be parsed here: ~8–20 ms (30–80 ms a MB measured), so other orgs wait at most that. */
export const IN_THREAD_SCHEMA_BYTES = 256 * 1024;
/** Schema sizes remembered (an entry is ~200 bytes; one per database read, least recently learnt dropped first). */
const MAX_KNOWN = 10_000;

export interface FileId {
  dev: number;
  ino: number;
  /** Inode numbers are reused after a delete; the birth time tells the files apart (0 where unsupported). */
  birthtimeMs: number;
}

const sameFile = (a: FileId, b: FileId) => a.dev === b.dev && a.ino === b.ino && a.birthtimeMs === b.birthtimeMs;
const fileId = (s: Stats): FileId => ({ dev: s.dev, ino: s.ino, birthtimeMs: s.birthtimeMs });

export interface Page {
  events: ChangeEvent[];
  version: number;
}

interface Reader {
  db: DatabaseSync;
  /** The file the connection opened: a database deleted and made again under the same name is another file. */
  file: FileId;
  /** PRAGMA schema_version: reads the schema cookie from the file's header without parsing the schema. */
  cookie: StatementSync;
  /** The cookie of the schema this connection last parsed; null before its first read. */
  parsedAt: number | null;
  /** Prepared on the first read the schema may be parsed for (preparing parses it). */
  statements: { version: StatementSync; oldest: StatementSync; events: StatementSync; schemaBytes: StatementSync } | null;
  usedAt: number;
}

/** Reading here was refused: the schema would be parsed and is not known to be small. An executor reads instead. */
export const NOT_HERE = Symbol('not here');

export class ChangeLogFiles {
  private readonly layout: Layout;
  private readonly readers = new Map<string, Reader>();
  /** Schema sizes an executor reported or a parse here measured, by path: valid for that file at that cookie only. */
  private readonly known = new Map<string, { file: FileId; cookie: number; bytes: number }>();
  private readonly sweeper: NodeJS.Timeout;

  /** `dbRoot` is the db service's DATA_DIR/db. */
  constructor(dbRoot: string) {
    this.layout = new Layout(dbRoot);
    this.sweeper = setInterval(() => this.closeIdle(), IDLE_CLOSE_MS / 2);
    this.sweeper.unref();
  }

  /** The same page as POST /_db/changes serves (one read transaction: committed writes only; `gone` past retention). */
  read(scope: Scope, since: number, limit: number): Page | typeof NOT_HERE {
    const path = this.layout.path(scope);
    const r = this.reader(path, scope);
    return this.inSnapshot(path, r, (s) => {
      const version = readVersion(s.version);
      const oldest = (s.oldest.get() as { v: number | bigint | null }).v;
      const firstKept = oldest === null ? version + 1 : Number(oldest);
      // The same rule as POST /_db/changes (src/db/executor/read-ops.ts).
      if (since < version && since < firstKept - 1) {
        throw new ApiError('gone', `events after version ${since} are no longer kept; the oldest kept is ${firstKept}`, { oldestVersion: firstKept, version });
      }
      const rows = s.events.all(since, limit) as { event: string }[];
      return { events: rows.map((row) => keepBody(JSON.parse(row.event) as ChangeEvent, row.event)), version };
    }, { events: [], version: 0 });
  }

  /** The current version; null when the database does not exist. The recovery scan visits every database once: no connection is kept. */
  version(scope: Scope): number | null | typeof NOT_HERE {
    const path = this.layout.path(scope);
    if (this.readers.has(path)) {
      const page = this.read(scope, Number.MAX_SAFE_INTEGER, 1);
      return page === NOT_HERE ? page : page.version;
    }
    const file = statSync(path, { throwIfNoEntry: false });
    if (!file) return null;
    const once = openReader(path, file);
    try {
      return this.inSnapshot(path, once, (s) => readVersion(s.version), 0);
    } finally {
      once.db.close();
    }
  }

  /** The file now at `scope`'s path, to tie what an executor is about to report to it; null when there is none. */
  identify(scope: Scope): FileId | null {
    const file = statSync(this.layout.path(scope), { throwIfNoEntry: false });
    return file ? fileId(file) : null;
  }

  /** An executor read `file` with a schema of `bytes` at `cookie`: parsing it here is cheap or not while the cookie holds. */
  learn(scope: Scope, file: FileId, schema: { bytes: number; cookie: number }): void {
    this.remember(this.layout.path(scope), file, schema);
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const path of [...this.readers.keys()]) this.drop(path);
  }

  /**
   * Runs `then` in one read transaction (the version and the events from one snapshot, only committed writes), unless
   * that would parse a schema not known to be small: NOT_HERE. `empty` while the database has no tables yet.
   */
  private inSnapshot<T>(path: string, r: Reader, then: (s: NonNullable<Reader['statements']>) => T, empty: T): T | typeof NOT_HERE {
    try {
      r.db.exec('BEGIN');
      try {
        const cookie = Number((r.cookie.get() as { schema_version: number | bigint }).schema_version);
        // The executor creates the file, then its internal tables: a database caught in between has nothing to deliver yet.
        if (cookie === 0) return empty;
        const parsing = cookie !== r.parsedAt;
        if (parsing && !this.cheapToParse(path, r.file, cookie)) return NOT_HERE;
        if (r.statements === null) {
          if (r.db.prepare("SELECT count(*) AS n FROM sqlite_schema WHERE name IN ('_scopebase_meta', '_scopebase_changes')").get()!.n !== 2) return empty;
          r.statements = prepare(r.db);
        }
        r.parsedAt = cookie;
        // Parsed now, its size costs nothing more: a connection opened again (idle, or another's turn) reads here at once.
        if (parsing) this.remember(path, r.file, { bytes: Number((r.statements.schemaBytes.get() as { bytes: number | bigint }).bytes), cookie });
        return then(r.statements);
      } finally {
        if (r.db.isTransaction) r.db.exec('COMMIT'); // an I/O error has rolled it back already
      }
    } catch (e) {
      if (!(e instanceof ApiError)) this.drop(path); // a fresh connection next time
      throw e;
    }
  }

  private remember(path: string, file: FileId, schema: { bytes: number; cookie: number }): void {
    this.known.delete(path); // re-inserted last: the map's order is least recently learnt first
    this.known.set(path, { file, cookie: schema.cookie, bytes: schema.bytes });
    if (this.known.size > MAX_KNOWN) this.known.delete(this.known.keys().next().value!);
  }

  /** Whether parsing the schema at `cookie` costs little: its size as an executor saw it, else the file and its WAL bound it. */
  private cheapToParse(path: string, file: FileId, cookie: number): boolean {
    const known = this.known.get(path);
    if (known && known.cookie === cookie && sameFile(known.file, file)) return known.bytes <= IN_THREAD_SCHEMA_BYTES;
    const size = (suffix: string) => statSync(path + suffix, { throwIfNoEntry: false })?.size ?? 0;
    return size('') + size('-wal') <= IN_THREAD_SCHEMA_BYTES;
  }

  /** The open connection for `path`, reopened when the file was replaced. */
  private reader(path: string, scope: Scope): Reader {
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
      r = openReader(path, file);
      if (this.readers.size >= MAX_OPEN) this.drop(this.readers.keys().next().value!);
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

function readVersion(statement: StatementSync): number {
  return Number((statement.get() as { value: number | bigint } | undefined)?.value ?? 0);
}

/** A read-only connection; nothing that parses the schema runs yet. */
function openReader(path: string, file: Stats): Reader {
  return openSqlite(path, { readOnly: true, timeout: 5000 }, (db) => ({
    db, file: fileId(file), cookie: db.prepare('PRAGMA schema_version'), parsedAt: null, statements: null, usedAt: 0,
  }));
}

function prepare(db: DatabaseSync): NonNullable<Reader['statements']> {
  // Delivery reads each event once, in order: a small page cache is enough.
  db.exec('PRAGMA cache_size = -256');
  return {
    version: db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'"),
    oldest: db.prepare('SELECT min(version) AS v FROM _scopebase_changes'),
    events: db.prepare('SELECT event FROM _scopebase_changes WHERE version > ? ORDER BY version LIMIT ?'),
    // As the executor measures it (src/db/executor/read-ops.ts): octet_length reads no text.
    schemaBytes: db.prepare('SELECT coalesce(sum(octet_length(sql)), 0) AS bytes FROM sqlite_schema'),
  };
}
