// One open database inside an executor process: its connection, sandbox and statement cache (the LRU bounding them:
// handle-cache.ts).
import type { DatabaseSync, DatabaseSyncOptions, StatementSync } from 'node:sqlite';
import { pathToFileURL } from 'node:url';
import { Sandbox, type Findings, type Mode } from '../sandbox.ts';
import { paramSlots, type ParamSlots } from '../params.ts';
import { hasInternalSchema, INTERNAL_SCHEMA } from './schema.ts';
import { ApiError } from '../../shared/errors.ts';
import { openSqlite } from '../../shared/sqlite-open.ts';
import { hasSecondStatement, longestBlobLiteral } from '../statement-end.ts';
import type { Archiver, HistoryOptions } from '../history/archive.ts';
import type { Cover } from './key-cover.ts';

export interface ExecutorLimits {
  sync: 'full' | 'normal';
  maxValueBytes: number;
  maxSizeBytes: number;
  maxResultBytes: number;
  maxOpen: number;
  /** A connection unused this long (ms) is closed; 0 never (DB_IDLE_CLOSE_MS). */
  idleCloseMs: number;
  /** Time-travel history (SPEC 4.11); absent where none is kept (a replica, or DB_HISTORY_DAYS=0). */
  history?: HistoryOptions;
  /** Where SQLite puts its temporary files (SQLITE_TMPDIR of the process): DATA_DIR/tmp. Absent: the OS's. */
  tempDir?: string;
  /** Bytes of temporary files a process may hold while a statement runs (DB_TEMP_MAX_BYTES); absent: no limit. */
  tempMaxBytes?: number;
  /** How long a connection waits for a lock another holds before SQLITE_BUSY (ExecutorPool: under the statement limit). */
  busyTimeoutMs?: number;
  /** Bytes of memory a statement may add to its process (DB_MEMORY_MAX_BYTES); absent: no limit. */
  memoryMaxBytes?: number;
}

/** A statement prepared under the sandbox, with what preparing it found (Findings, documented in sandbox.ts). */
export interface Prepared extends Findings {
  stmt: StatementSync;
  returnsRows: boolean;
  /** Inserts into a WITHOUT ROWID table, which leaves last_insert_rowid() as it was (an internal insert's). */
  noRowid: boolean;
  /** Has the form of a full-text command on an FTS3/4/5 table (commandTarget), whose rowid SQLite reports as 0. */
  command: boolean;
  /** The schema version it was prepared under (writes; 0 for others, whose findings the schema does not change). */
  schema: number;
  /** The parameters the statement takes (read once, with the statement). */
  params: ParamSlots;
}

const STATEMENTS_PER_DB = 128;
/**
 * The SQL text a connection's statement cache may hold, and the longest text cached at all. A prepared statement
 * holds many times its text (`x IN (1,1,…)` of 3 MB held 155 MB): 128 of any size per database, 64 databases per
 * process, made a few dozen distinct reads keep gigabytes in an executor for good. Now at most 4 MiB of text a
 * process (~250 MB compiled at that rate); a longer statement is prepared for its request and dropped.
 */
const CACHED_SQL_CHARS = 64 * 1024;
const CACHEABLE_SQL_CHARS = 8 * 1024;
/**
 * SQLite's length limit bounds each string and blob and each row's record (values plus a header of up to 9 bytes a
 * column, 2,000 columns at most): this much above DB_MAX_VALUE_BYTES lets one value of exactly the limit be stored.
 * It is the connection's limit for the project's own writes (the change log's events) and for reads; a user's write
 * runs under a tighter one (writeLength).
 */
const ROW_HEADER_BYTES = 9 * 2000 + 9;

/**
 * What a record holding one value of exactly DB_MAX_VALUE_BYTES needs besides it, in a table or index of `columns`
 * columns: its header (a varint of its length, up to 3 bytes; the large value's serial type, up to 5; one byte for
 * each other value's) and up to 8 bytes for each other value (a number). So a user's write may store a row whose
 * other values are numbers (or NULLs, or short texts) next to a value of exactly the limit, and a value computed in
 * SQL (`zeroblob(n)`, `||`, `printf`) passes the limit by at most this, not by ROW_HEADER_BYTES.
 */
export const recordRoom = (columns: number): number => 9 * columns + 8;

/** The widest table or index of the main schema, in the columns its records hold (an index's rowid included). */
const WIDEST = "SELECT max(n) AS n FROM (SELECT ncol AS n FROM pragma_table_list WHERE schema = 'main' UNION ALL SELECT (SELECT count(*) FROM pragma_index_xinfo(name)) FROM main.sqlite_schema WHERE type = 'index')";
/** An empty database in memory: what a database that does not exist yet is described as (HandleCache.empty). */
/** An empty database with the internal tables, in memory: what reads of a database not yet made see. */
export const EMPTY = ':memory:';

/** `INSERT INTO t(a, …)`: the table as written and its column list. */
const INSERT_COLUMNS = /\bINTO\s+(?:\S+?\s*\.\s*)?("[^"]+"|`[^`]+`|\[[^\]]+\]|[^\s(]+)\s*\(([^)]*)\)/i;

/**
 * The table an INSERT names as one of its columns (null when it names none): the form of a full-text command
 * (`INSERT INTO ft(ft) VALUES('optimize')`), which may change nothing.
 */
function commandTarget(sql: string): string | null {
  const m = INSERT_COLUMNS.exec(sql);
  if (!m) return null;
  const bare = (name: string) => name.trim().replace(/^["`[]|["`\]]$/g, '').toLowerCase();
  return m[2]!.split(',').some((c) => bare(c) === bare(m[1]!)) ? bare(m[1]!) : null;
}

/** How each table's changes show in a changeset, and which are shadow tables, as of a schema version (key-cover.ts). */
interface KeyedTables { schema: number; known: Map<string, Cover>; shadow: Set<string> | null }

/** How a read reaches a database that a full disk keeps from opening as usual (HandleCache.readWhileDiskFull). */
type DiskFullRead = 'immutable' | 'exclusive';

export class DbHandle {
  readonly db: DatabaseSync;
  readonly sandbox = new Sandbox();
  private readonly cache = new Map<string, Prepared>();
  /** The characters of SQL text the cache holds (CACHED_SQL_CHARS). */
  private cachedChars = 0;
  private schemaStmt: StatementSync | null = null;
  private rowidStmt: StatementSync | null = null;
  /** writeLength's answer for one schema version. */
  private writeLimit = { schema: -1, length: 0 };
  private readonly maxValueBytes: number;

  readonly path: string;
  /** How each table's changes show in a changeset, and which are shadow tables, as of a schema version (key-cover.ts). */
  private keyedTables: KeyedTables = { schema: -1, known: new Map(), shadow: null };
  /** Foreign-key checks are deferred to the end of the running request (foreign-keys.ts). */
  deferringForeignKeys = false;
  /** When an operation last took this handle (performance.now()), for closing idle connections. */
  usedAt = performance.now();
  readonly history: HistoryOptions | null;
  /** Records each commit into the database's history (history/archive.ts); made at the first commit. */
  archiver: Archiver | null = null;

  /** `diskFull`: a connection for one read without the shared-memory file (see readWhileDiskFull), never cached. */
  constructor(path: string, create: boolean, limits: ExecutorLimits, diskFull: DiskFullRead | null = null) {
    this.path = path;
    this.history = limits.history ?? null;
    this.maxValueBytes = limits.maxValueBytes;
    const immutable = diskFull === 'immutable';
    const url = path === EMPTY ? EMPTY : pathToFileURL(path);
    if (url instanceof URL) url.searchParams.set('mode', immutable ? 'ro' : create ? 'rwc' : 'rw');
    if (url instanceof URL && immutable) url.searchParams.set('immutable', '1');
    const options = {
      // busy wait between executor processes; writes are serialized upstream, so this is only a backstop. The
      // exclusive fallback waits little: a connection open elsewhere means the usual open works again.
      timeout: diskFull === 'exclusive' ? 100 : limits.busyTimeoutMs ?? 10_000,
      enableForeignKeyConstraints: true,
      allowExtension: false,
      defensive: true,
      readOnly: immutable,
      limits: { length: limits.maxValueBytes + ROW_HEADER_BYTES, attach: 0 },
    } as DatabaseSyncOptions;
    this.db = openSqlite(url, options, (db) => {
      // Before the first access: SQLite then keeps the WAL index in this process's memory, not in the -shm file.
      if (diskFull === 'exclusive') db.exec('PRAGMA locking_mode=EXCLUSIVE');
      this.sandbox.install(db);
      db.exec('PRAGMA cache_size=-2000; PRAGMA trusted_schema=OFF');
      if (diskFull) return db;
      db.exec(`PRAGMA journal_mode=WAL; PRAGMA synchronous=${limits.sync === 'full' ? 'FULL' : 'NORMAL'}`);
      const pageSize = Number((db.prepare('PRAGMA page_size').get() as { page_size: number }).page_size);
      db.exec(`PRAGMA max_page_count=${Math.max(16, Math.floor(limits.maxSizeBytes / pageSize))}`);
      // One transaction: a process killed while it made a new database left its file empty, or with part of these
      // tables (each statement committed alone), and every request to it failed for good ("no such table"). Such a
      // file is finished at its next open: it is a database at version 0.
      if (create || !hasInternalSchema(db)) db.exec(`BEGIN IMMEDIATE; ${INTERNAL_SCHEMA} COMMIT;`);
      return db;
    });
  }

  /** Prepares (or reuses) a statement under `mode`; the sandbox decides at prepare time. */
  prepare(sql: string, mode: Mode): Prepared {
    const sb = this.sandbox;
    sb.mode = mode; // also governs automatic re-prepares while the statement runs
    sb.denied = null;
    const key = mode === 'internal' ? `i\0${sql}` : mode === 'read' ? `r\0${sql}` : `w\0${sql}`;
    const hit = this.cache.get(key);
    // What a write was found to do (the tables it and its triggers write, …) holds for the schema it was prepared
    // under: a trigger made since, by any connection, is found only by preparing it again.
    const schema = mode === 'write' ? this.schemaVersion() : 0;
    if (hit && hit.schema === schema) return hit;
    sb.reset();
    // node:sqlite prepares the first statement and drops the rest without a word: a second one is refused, on
    // every path (JSON requests check it earlier, with their own wording; a transaction's statements do not).
    if (mode !== 'internal' && hasSecondStatement(sql)) throw new ApiError('sql_error', 'the SQL text holds more than one statement: send one statement at a time (the rest would be ignored)');
    if (mode !== 'internal') this.checkBlobLiterals(sql);
    let stmt = this.db.prepare(sql);
    let found = sb.findings();
    // An R*Tree first used on this connection is connected by the prepare, and its constructor prepares its own
    // writes to its shadow tables under the sandbox: they are not the statement's. Prepared again (the table stays
    // connected), they are gone. No user statement writes a shadow table itself: defensive mode refuses it.
    if (mode === 'write' && found.written.length > 0 && found.written.some((t) => this.shadowTables(schema).has(t))) {
      sb.mode = mode;
      sb.reset();
      stmt = this.db.prepare(sql);
      found = sb.findings();
    }
    if (mode !== 'internal') stmt.setAllowBareNamedParameters(false); // bound by each slot's token (params.ts bindNamed)
    const command = found.inserts ? commandTarget(sql) : null;
    const prepared: Prepared = {
      ...found, stmt, returnsRows: stmt.columns().length > 0, rewrites: found.rewrites || /replace/i.test(sql) || command !== null,
      command: command !== null && this.fullText(command), noRowid: found.inserts && found.written.some((t) => this.withoutRowid(t)), params: paramSlots(sql), schema,
    };
    sb.mode = mode; // the lookups above may have prepared statements of ours
    if (key.length > CACHEABLE_SQL_CHARS) return prepared;
    if (hit) this.uncache(key); // prepared again under a newer schema
    while (this.cache.size > 0 && (this.cache.size >= STATEMENTS_PER_DB || this.cachedChars + key.length > CACHED_SQL_CHARS)) this.uncache(this.cache.keys().next().value!);
    this.cache.set(key, prepared);
    this.cachedChars += key.length;
    return prepared;
  }

  private uncache(key: string): void {
    if (this.cache.delete(key)) this.cachedChars -= key.length;
  }

  /** SQLite makes a blob literal over its length limit NULL without an error: one over DB_MAX_VALUE_BYTES is refused, as a parameter is. */
  checkBlobLiterals(sql: string): void {
    if (sql.length <= 2 * this.maxValueBytes) return; // too short to hold one
    const bytes = longestBlobLiteral(sql);
    if (bytes > this.maxValueBytes) throw new ApiError('quota_exceeded', `a blob literal (X'…') is ${bytes} bytes, over the length limit of ${this.maxValueBytes} (DB_MAX_VALUE_BYTES)`, { sqliteCode: 'SQLITE_TOOBIG' });
  }

  /** Whether a table of the main schema is a full-text index (FTS3, FTS4, FTS5), whose commands insert no row. */
  private fullText(table: string): boolean {
    const row = this.internal("SELECT sql FROM main.sqlite_schema WHERE type = 'table' AND name = ? COLLATE NOCASE").get(table) as { sql: string | null } | undefined;
    return /^CREATE\s+VIRTUAL\s+TABLE\b[^(]*\bUSING\s+fts[345]\b/i.test(row?.sql ?? '');
  }

  /** The main schema's shadow tables (a virtual table's storage) as of schema version `schema`. */
  shadowTables(schema: number): Set<string> {
    const keyed = this.keyed(schema);
    keyed.shadow ??= new Set((this.internal("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'").all() as { name: string }[]).map((r) => r.name));
    return keyed.shadow;
  }

  /** What is known of the tables' keys (key-cover.ts), forgotten when the schema version is no longer `schema`. */
  keyed(schema: number): KeyedTables {
    if (this.keyedTables.schema !== schema) this.keyedTables = { schema, known: new Map(), shadow: null };
    return this.keyedTables;
  }

  /**
   * Runs a read (`run` prepares and steps it). One refused as a write may have been refused for a virtual table's
   * constructor, not for itself: an R*Tree first used on a connection (or after the schema was reloaded) prepares the
   * writes it will need on its shadow tables, under the read's sandbox. It runs once more with every virtual table
   * connected under ours: a read goes through, a write is refused again. A refused read returns nothing, so nothing is
   * counted twice.
   */
  read<T>(run: () => T): T {
    try {
      return run();
    } catch (e) {
      const { denied, mode } = this.sandbox;
      if (denied?.code !== 'read_only') throw e;
      const any = this.connectVirtualTables();
      Object.assign(this.sandbox, { denied, mode }); // as the refusal left them, for the caller's error
      if (!any) throw e;
      return run();
    }
  }

  /** Connects every virtual table of the main schema under internal mode; false when it has none. */
  private connectVirtualTables(): boolean {
    const tables = this.internal("SELECT name FROM main.sqlite_schema WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'").all() as { name: string }[];
    for (const { name } of tables) {
      try {
        this.internal("SELECT count(*) FROM pragma_table_xinfo(?, 'main')").get(name); // knowing its columns connects it
      } catch {
        // one that cannot connect fails the read again, with its own error
      }
    }
    return tables.length > 0;
  }

  /** Whether a table is WITHOUT ROWID (a read-only introspection pragma: no sandbox mode needed). */
  private withoutRowid(table: string): boolean {
    this.rowidStmt ??= this.db.prepare("SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?");
    return (this.rowidStmt.get(table) as { wr: number } | undefined)?.wr === 1;
  }

  /** The connection's schema version, through one statement kept for it (it needs no sandbox: a read-only pragma). */
  schemaVersion(): number {
    this.schemaStmt ??= this.db.prepare('PRAGMA schema_version');
    return Number((this.schemaStmt.get() as { schema_version: number }).schema_version);
  }

  /**
   * SQLITE_LIMIT_LENGTH for a user's write under schema version `schema`: DB_MAX_VALUE_BYTES and the record room of
   * the schema's widest table or index (recordRoom). Read with the sandbox out of the way; its mode is kept.
   */
  writeLength(schema: number): number {
    if (this.writeLimit.schema !== schema) {
      const mode = this.sandbox.mode;
      const widest = Number((this.internal(WIDEST).get() as { n: number | bigint | null }).n ?? 1);
      this.sandbox.mode = mode;
      this.writeLimit = { schema, length: this.maxValueBytes + recordRoom(widest) };
    }
    return this.writeLimit.length;
  }

  /**
   * Runs `run` (a user's write) under `length` (writeLength, read before: reading it may prepare a statement, which
   * resets what the sandbox collects), then gives the connection its own limit back.
   */
  writing<T>(length: number, run: () => T): T {
    const own = this.db.limits.length;
    this.db.limits.length = length;
    try {
      return run();
    } finally {
      this.db.limits.length = own;
    }
  }

  /** Runs the project's own SQL (never user SQL) with the sandbox out of the way. */
  internal(sql: string): StatementSync {
    return this.prepare(sql, 'internal').stmt;
  }

  version(): number {
    const row = this.internal("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number | bigint } | undefined;
    return row ? Number(row.value) : 0;
  }

  close(): void {
    this.archiver?.close();
    this.cache.clear();
    this.cachedChars = 0;
    try {
      this.db.close();
    } catch {
      // already closed
    }
  }
}
