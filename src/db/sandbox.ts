// SPEC 4.8: user SQL runs inside its scope's file and nothing else. The authorizer sees every statement at
// prepare time (and at every automatic re-prepare), so a cached statement was authorized under its mode.
import { constants, type DatabaseSync } from 'node:sqlite';
import { ApiError } from '../shared/errors.ts';
import type { ExecError } from './sqlite-errors.ts';

export const INTERNAL_PREFIX = '_scopebase_';

/** read: /_db/query; write: execute and migrate; internal: the project's own statements. */
export type Mode = 'read' | 'write' | 'internal';

/** Pragmas that only describe a named object: allowed with or without an argument. */
const INTROSPECTION = new Set(['table_info', 'table_xinfo', 'table_list', 'index_list', 'index_info', 'index_xinfo', 'foreign_key_list', 'foreign_key_check', 'integrity_check', 'quick_check']);
/** Pragmas allowed only as reads (no value): they report settings without changing them. */
const READ_ONLY = new Set(['user_version', 'schema_version', 'application_id', 'page_count', 'page_size', 'freelist_count', 'encoding', 'data_version', 'collation_list', 'function_list', 'module_list', 'pragma_list', 'compile_options', 'foreign_keys', 'journal_mode', 'auto_vacuum']);

const C = constants as unknown as Record<string, number>;
const A = {
  CREATE_INDEX: 1, CREATE_TABLE: 2, CREATE_TEMP_INDEX: 3, CREATE_TEMP_TABLE: 4, CREATE_TEMP_TRIGGER: 5, CREATE_TEMP_VIEW: 6,
  CREATE_TRIGGER: 7, CREATE_VIEW: 8, DELETE: 9, DROP_INDEX: 10, DROP_TABLE: 11, DROP_TEMP_INDEX: 12, DROP_TEMP_TABLE: 13,
  DROP_TEMP_TRIGGER: 14, DROP_TEMP_VIEW: 15, DROP_TRIGGER: 16, DROP_VIEW: 17, INSERT: 18, PRAGMA: 19, READ: 20, SELECT: 21,
  TRANSACTION: 22, UPDATE: 23, ATTACH: 24, DETACH: 25, ALTER_TABLE: 26, REINDEX: 27, ANALYZE: 28, CREATE_VTABLE: 29,
  DROP_VTABLE: 30, FUNCTION: 31, SAVEPOINT: 32, RECURSIVE: 33,
} as const;
const OK = C.SQLITE_OK ?? 0;
const DENY = C.SQLITE_DENY ?? 1;

/** The schema table under its names: DDL writes it (a schema change, judged by schema_version). */
const SCHEMA_TABLES = new Set(['sqlite_master', 'sqlite_schema', 'sqlite_temp_master', 'sqlite_temp_schema']);
const isInternal = (name: string | null) => name !== null && name.toLowerCase().startsWith(INTERNAL_PREFIX);
/** The internal tables (executor/schema.ts): the only objects that may carry the prefix. */
const INTERNAL_TABLES = ['_scopebase_meta', '_scopebase_migrations', '_scopebase_changes'];
/** Virtual-table modules a table may be created with: full-text search and R*Trees. Others (dbstat, fts5vocab, fts3tokenize, …) expose internals or shadow tables. */
export const VTABLE_MODULES = new Set(['fts3', 'fts4', 'fts5', 'rtree', 'rtree_i32', 'geopoly']);

/** What preparing a statement found it does (Sandbox's fields of the same names; `dml` is false for DDL). */
export interface Findings {
  /** User tables the statement (and its triggers) writes. */
  written: string[];
  inserts: boolean;
  /** Changes rows of user tables: SQLite's changes() counts it (after DDL it still holds an earlier statement's count). */
  dml: boolean;
  checksSchema: boolean;
  /** Asks for foreign keys to be checked at the request's end (see foreign-keys.ts). */
  defersForeignKeys: boolean;
  /** Writes rows no changeset shows (see Sandbox.untracked). */
  untracked: boolean;
  /** May leave the rows it touched as they were: updates, deletes, REPLACE, a full-text command (see Sandbox.rewrites). */
  rewrites: boolean;
}

/** The per-connection sandbox: set `mode` before preparing or running; read `denied` after a SQLITE_AUTH error. */
export class Sandbox {
  mode: Mode = 'internal';
  denied: ExecError | null = null;
  /** An interactive transaction's connection (SPEC 4.10): SAVEPOINT, RELEASE and ROLLBACK TO nest inside it. */
  allowSavepoints = false;
  /** User tables a statement writes (collected at prepare time, for the change notification). */
  written = new Set<string>();
  /** Whether the statement being prepared inserts into a user table (lastInsertRowid is meaningful)… */
  inserts = false;
  /** …or inserts, updates or deletes rows of one (rowsAffected is meaningful; else it is 0)… */
  dml = false;
  /** …unless it is DDL (DROP TABLE deletes the table's rows, yet reports none). */
  ddl = false;
  /** `PRAGMA foreign_keys = OFF` or `defer_foreign_keys = ON`: foreign keys are checked at the request's end instead. */
  defersForeignKeys = false;
  /** Writes rows a changeset cannot show (ANALYZE's sqlite_stat1, sqlite_sequence): whether it changed anything is unknown. */
  untracked = false;
  /** Updates or deletes rows (itself or by a trigger): it may leave them as they were (see changedNothing). */
  rewrites = false;
  /**
   * Whether the schema must be checked after it runs: a trigger's body is only authorized when it fires, and
   * ALTER TABLE … RENAME TO names no new name to the authorizer (assertSchemaClean).
   */
  checksSchema = false;

  /** Forgets what the last statement prepared was found to do, before the next one is. */
  reset(): void {
    this.written = new Set();
    this.inserts = false;
    this.dml = false;
    this.ddl = false;
    this.defersForeignKeys = false;
    this.checksSchema = false;
    this.untracked = false;
    this.rewrites = false;
  }

  /** What the statement just prepared was found to do (read before any other statement is prepared). */
  findings(): Findings {
    return { written: [...this.written], inserts: this.inserts, dml: this.dml && !this.ddl, checksSchema: this.checksSchema, defersForeignKeys: this.defersForeignKeys, untracked: this.untracked, rewrites: this.rewrites };
  }

  install(db: DatabaseSync): void {
    db.setAuthorizer((action, a1, a2, dbName, inner) => this.check(action, a1, a2, dbName, inner));
  }

  private deny(code: 'not_allowed' | 'read_only', message: string): number {
    this.denied = { code, message };
    return DENY;
  }

  /** `inner`: the trigger or view the action is coded from (null for the statement itself). */
  check(action: number, a1: string | null, a2: string | null, dbName: string | null = null, inner: string | null = null): number {
    if (this.mode === 'internal') return OK;
    // Nothing may be created, changed or renamed in the temp schema: it would outlive the request on a shared
    // connection, and a temp object shadows a main one of the same name, internal tables included.
    // A temp trigger on a main table is reported as CREATE_TRIGGER in main: its row in sqlite_temp_master gives it
    // away. Other statements SQLite runs on sqlite_temp_master (ALTER TABLE … RENAME updates it) create nothing.
    const schemaTable = (a1 ?? '').startsWith('sqlite_');
    if (dbName === 'temp' && (schemaTable ? action === A.INSERT : action !== A.SELECT && action !== A.READ && action !== A.FUNCTION && action !== A.RECURSIVE)) {
      return this.mode === 'read' ? this.readOnly() : this.deny('not_allowed', 'the temp schema is not allowed: objects there would outlive the request on a shared connection');
    }
    switch (action) {
      case A.SELECT: case A.RECURSIVE: return OK;
      case A.READ:
        if (a1 !== null && a1.startsWith('pragma_') && !this.pragmaAllowed(a1.slice(7), null)) return this.deny('not_allowed', `PRAGMA ${a1.slice(7)} is not allowed`);
        return OK;
      case A.FUNCTION:
        if (a2 !== null && a2.toLowerCase() === 'load_extension') return this.deny('not_allowed', 'load_extension is not allowed');
        return OK;
      case A.PRAGMA:
        if (this.mode === 'write' && a2 !== null && deferringPragma(a1 ?? '', a2)) {
          this.defersForeignKeys = true; // run as a no-op; the executor defers foreign keys to the request's end
          return OK;
        }
        if (this.mode === 'write' && a2 !== null && /^(foreign_keys|defer_foreign_keys)$/i.test(a1 ?? '')) return OK; // turning them back on: a no-op
        return this.pragmaAllowed(a1 ?? '', a2) ? OK : this.deny('not_allowed', `PRAGMA ${a1}${a2 === null ? '' : ' = …'} is not allowed (see the read-only allow-list in docs/database.md)`);
      case A.ATTACH: return this.deny('not_allowed', 'ATTACH is not allowed');
      case A.DETACH: return this.deny('not_allowed', 'DETACH is not allowed');
      case A.SAVEPOINT:
        if (this.allowSavepoints) return OK;
        // falls through
      case A.TRANSACTION:
        return this.deny('not_allowed', 'transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE) is not allowed: a request is one transaction');
      case A.CREATE_TEMP_INDEX: case A.CREATE_TEMP_TABLE: case A.CREATE_TEMP_TRIGGER: case A.CREATE_TEMP_VIEW:
      case A.DROP_TEMP_INDEX: case A.DROP_TEMP_TABLE: case A.DROP_TEMP_TRIGGER: case A.DROP_TEMP_VIEW:
        return this.mode === 'read' ? this.readOnly() : this.deny('not_allowed', 'TEMP objects are not allowed: they would outlive the request on a shared connection');
    }
    if (this.mode === 'read') return this.readOnly();
    // Write mode: everything that changes the database, except the project's internal tables.
    if (action !== A.INSERT && action !== A.UPDATE && action !== A.DELETE && inner === null) this.ddl = true;
    switch (action) {
      case A.INSERT: case A.UPDATE: case A.DELETE:
        if (isInternal(a1)) return this.deny('not_allowed', `${a1} is an internal table and cannot be written`);
        // DDL writes sqlite_schema too: only rows of user tables make a statement DML.
        if (a1 !== null && a1.startsWith('sqlite_') && !SCHEMA_TABLES.has(a1)) this.untracked = true;
        if (a1 !== null && !a1.startsWith('sqlite_')) {
          this.written.add(a1);
          if (action !== A.INSERT) this.rewrites = true;
          // What a trigger does is not the statement's own: rowsAffected and lastInsertRowid speak of the statement.
          if (inner === null) {
            this.dml = true;
            if (action === A.INSERT) this.inserts = true;
          }
        }
        return OK;
      case A.CREATE_VTABLE:
        if (!VTABLE_MODULES.has((a2 ?? '').toLowerCase())) return this.deny('not_allowed', `virtual tables of module ${a2} are not allowed; the modules allowed are ${[...VTABLE_MODULES].join(', ')}`);
        this.checksSchema = true;
      // falls through
      case A.CREATE_TABLE:
        this.checksSchema = true; // a key may reference an internal table
      // falls through
      case A.DROP_TABLE: case A.DROP_VTABLE:
        if (isInternal(a1)) return this.deny('not_allowed', `the ${INTERNAL_PREFIX} name prefix is reserved`);
        if (a1 !== null && !a1.startsWith('sqlite_')) this.written.add(a1); // not sqlite_sequence, made by AUTOINCREMENT
        return OK;
      case A.CREATE_VIEW:
        this.checksSchema = true;
      // falls through
      case A.DROP_VIEW:
        return isInternal(a1) ? this.deny('not_allowed', `the ${INTERNAL_PREFIX} name prefix is reserved`) : OK;
      case A.CREATE_TRIGGER:
        this.checksSchema = true;
        return isInternal(a1) || isInternal(a2) ? this.deny('not_allowed', `the ${INTERNAL_PREFIX} name prefix is reserved`) : OK;
      case A.CREATE_INDEX: case A.DROP_INDEX: case A.DROP_TRIGGER:
        return isInternal(a1) || isInternal(a2) ? this.deny('not_allowed', `the ${INTERNAL_PREFIX} name prefix is reserved`) : OK;
      case A.ALTER_TABLE:
        if (isInternal(a2)) return this.deny('not_allowed', `${a2} is an internal table and cannot be altered`);
        this.checksSchema = true;
        if (a2 !== null) this.written.add(a2);
        return OK;
      case A.REINDEX: return OK;
      case A.ANALYZE:
        this.untracked = true;
        return OK;
      default: return this.deny('not_allowed', `statement refused by the sandbox (action ${action})`);
    }
  }

  private readOnly(): number {
    return this.deny('read_only', 'a write was sent to /_db/query: use /_db/execute for writes');
  }

  private pragmaAllowed(name: string, arg: string | null): boolean {
    const n = name.toLowerCase();
    return INTROSPECTION.has(n) || (arg === null && READ_ONLY.has(n));
  }
}

/** `foreign_keys = OFF` (inside a transaction SQLite ignores it) or `defer_foreign_keys = ON`. */
function deferringPragma(name: string, value: string): boolean {
  const v = value.toLowerCase().replace(/^['"]|['"]$/g, '');
  const on = v === 'on' || v === '1' || v === 'true' || v === 'yes';
  const off = v === 'off' || v === '0' || v === 'false' || v === 'no';
  return (name.toLowerCase() === 'foreign_keys' && off) || (name.toLowerCase() === 'defer_foreign_keys' && on);
}

/**
 * Refuses any object other than the internal tables (and their indexes) whose SQL names an internal table: a trigger,
 * a view, a virtual table's `content=` or a key that references one. On the text, so a mention in a literal counts too.
 */
export function assertNoInternalReference(db: DatabaseSync): void {
  const internal = INTERNAL_TABLES.map((t) => `'${t}'`).join(', ');
  const refers = db.prepare(`SELECT type, name FROM main.sqlite_schema WHERE name NOT IN (${internal}) AND tbl_name NOT IN (${internal}) AND lower(sql) LIKE '%\\${INTERNAL_PREFIX.slice(0, -1)}\\_%' ESCAPE '\\' LIMIT 1`).get() as { type: string; name: string } | undefined;
  if (refers) throw new ApiError('not_allowed', `${refers.type} ${refers.name} refers to an internal table (${INTERNAL_PREFIX}*)`);
}

/**
 * After a statement that changed the schema in ways the authorizer cannot judge: refuses objects that refer to an
 * internal table (SPEC 4.8: by any path), and any object other than the internal tables under the reserved prefix
 * (a table renamed into it, a virtual table's shadow tables).
 */
export function assertSchemaClean(db: DatabaseSync, ordinaryBefore?: ReadonlySet<string>): void {
  assertNoInternalReference(db);
  if (ordinaryBefore !== undefined) assertNoTakeover(db, ordinaryBefore);
  // Defensive mode refuses these only when the shadow table is one as the trigger is made; a file's schema may order
  // them otherwise. Such a schema no connection loads again (a database beyond repair, backups failing on it).
  const onShadow = db.prepare("SELECT s.name AS name, s.tbl_name AS tbl FROM main.sqlite_schema s JOIN pragma_table_list l ON l.schema = 'main' AND l.name = s.tbl_name WHERE s.type = 'trigger' AND l.type = 'shadow' LIMIT 1").get() as { name: string; tbl: string } | undefined;
  if (onShadow) throw new ApiError('not_allowed', `trigger ${onShadow.name} is on ${onShadow.tbl}, a virtual table's shadow table: triggers may not be made on those`);
  const reserved = db.prepare(`SELECT name FROM main.sqlite_schema WHERE lower(name) LIKE '\\${INTERNAL_PREFIX.slice(0, -1)}\\_%' ESCAPE '\\' AND name NOT IN (${INTERNAL_TABLES.map((t) => `'${t}'`).join(', ')}) LIMIT 1`).get() as { name: string } | undefined;
  if (reserved) throw new ApiError('not_allowed', `the ${INTERNAL_PREFIX} name prefix is reserved (${reserved.name})`);
}

/** The main schema's ordinary tables (PRAGMA table_list's 'table'), before a statement that may change the schema. */
export function ordinaryTables(db: DatabaseSync): Set<string> {
  return new Set((db.prepare("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'").all() as { name: string }[]).map((r) => r.name));
}

/**
 * fts3/fts4 take an existing `<name>_stat` (fts3 `_docsize` too) as their storage, at CREATE VIRTUAL TABLE or at a
 * rename onto `<name>`: the user's table became a shadow table, unlisted, unwritable, left out of SQL exports and
 * dropped with the full-text table. Such a statement is refused (its caller rolls it back).
 */
function assertNoTakeover(db: DatabaseSync, ordinaryBefore: ReadonlySet<string>): void {
  const list = db.prepare("SELECT name, type FROM pragma_table_list WHERE schema = 'main' AND type IN ('shadow', 'virtual')").all() as { name: string; type: string }[];
  const taken = list.find((t) => t.type === 'shadow' && ordinaryBefore.has(t.name));
  if (taken === undefined) return;
  const owner = list.find((t) => t.type === 'virtual' && taken.name.toLowerCase().startsWith(`${t.name.toLowerCase()}_`))?.name ?? 'a virtual table';
  throw new ApiError('not_allowed', `table ${taken.name} would become the storage (a shadow table) of full-text table ${owner}: it would no longer be listed, written or exported as yours, and would be dropped with ${owner}; rename ${taken.name} first, or give the full-text table another name`, { table: taken.name, virtualTable: owner });
}
