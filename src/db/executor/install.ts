// Replaces a database's content with another file's (a restore, an import) as one ordinary write: one transaction
// through the writer's own connection, so it is atomic (a kill at any moment leaves the database as it was), goes
// through the log that history keeps, and bumps the version once. Rows keep their rowids; the change log is kept.
import type { DatabaseSync } from 'node:sqlite';
import type { DbHandle } from './handles.ts';
import { assertSchemaClean, INTERNAL_PREFIX } from '../sandbox.ts';
import { hasSecondStatement } from '../statement-end.ts';
import { ApiError } from '../../shared/errors.ts';

const q = (name: string) => `"${name.replaceAll('"', '""')}"`;

interface SchemaRow { type: string; name: string; tbl_name: string; sql: string | null }

const isUser = (name: string) => !name.toLowerCase().startsWith(INTERNAL_PREFIX) && !name.startsWith('sqlite_');

/**
 * Runs `fn` with `source` attached as `src` (outside any transaction: SQLite detaches only there) and the connection
 * opened up for copying: full-text indexes are copied through their shadow tables, which defensive mode guards.
 */
export function withSource<T>(h: DbHandle, source: string, fn: () => T): T {
  const db = h.db;
  h.sandbox.mode = 'internal';
  db.limits.attach = 1;
  try {
    db.prepare('ATTACH DATABASE ? AS src').run(source);
  } catch (e) {
    db.limits.attach = 0; // the connection is cached: it must not keep the room for an attach
    throw e;
  }
  db.enableDefensive(false);
  try {
    return fn();
  } finally {
    db.enableDefensive(true);
    db.prepare('DETACH DATABASE src').run();
    db.limits.attach = 0;
  }
}

/**
 * Copies user content (and the applied-migrations list) of attached `src` over the database's, in the open
 * transaction. The file's schema is text from its sender: each object is created as the repo's own SQL would be,
 * under the sandbox's write mode (SPEC 4.8), and the schema is checked after.
 */
export function replaceContent(h: DbHandle): { tables: string[] } {
  h.sandbox.mode = 'internal';
  const tables = copyContent(h.db, true, (sql) => {
    h.db.enableDefensive(true); // off only to copy rows into shadow tables: with it off, a trigger could go on one
    try {
      h.prepare(sql, 'write').stmt.run();
    } catch (e) {
      const denied = h.sandbox.denied; // read now: the rollback's own statements clear it
      throw denied === null ? e : new ApiError(denied.code, denied.message, denied.details);
    } finally {
      h.sandbox.mode = 'internal';
      h.db.enableDefensive(false);
    }
  });
  assertSchemaClean(h.db);
  return tables;
}

/**
 * Runs one object's CREATE statement from a schema. Only that statement: SQLite loads a schema row whose text goes on
 * after it (`CREATE TABLE t(a); ATTACH …`), and running the rest would run whatever a crafted file put there.
 */
export function createOnly(db: DatabaseSync, sql: string): void {
  if (hasSecondStatement(sql)) throw oneStatementOnly();
  db.prepare(sql).run();
}

export const oneStatementOnly = () => new ApiError('not_allowed', 'an object of the file\'s schema has more SQL after its CREATE statement (a crafted file): a schema entry is one statement');

/**
 * Replaces main's user objects and rows with attached `src`'s (and, with `migrations`, the applied list); `create`
 * makes each object from its schema text.
 */
export function copyContent(db: DatabaseSync, migrations: boolean, create: (sql: string) => void = (sql) => createOnly(db, sql)): { tables: string[] } {
  const run = (sql: string, ...args: (string | number)[]) => db.prepare(sql).run(...args);
  const all = <T>(sql: string) => db.prepare(sql).all() as T[];
  const touched = new Set(userTables(db, 'main'));
  {
    // Out with the old: views and triggers, then virtual tables (their shadow tables go with them), then tables.
    const old = all<SchemaRow>("SELECT type, name, tbl_name, sql FROM main.sqlite_schema WHERE type IN ('view', 'trigger', 'table')");
    for (const o of old) if (isUser(o.name) && o.type !== 'table') run(`DROP ${o.type.toUpperCase()} IF EXISTS main.${q(o.name)}`);
    for (const o of old) if (isUser(o.name) && o.type === 'table' && /^CREATE\s+VIRTUAL/i.test(o.sql ?? '')) run(`DROP TABLE IF EXISTS main.${q(o.name)}`);
    for (const o of all<SchemaRow>("SELECT name FROM main.sqlite_schema WHERE type = 'table'")) if (isUser(o.name)) run(`DROP TABLE IF EXISTS main.${q(o.name)}`);
    if (all("SELECT 1 FROM main.sqlite_schema WHERE name = 'sqlite_sequence'").length) run('DELETE FROM main.sqlite_sequence');

    // In with the new, in creation order: virtual tables first (they make their shadow tables), then tables.
    const objs = all<SchemaRow>('SELECT type, name, tbl_name, sql FROM src.sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid').filter((o) => isUser(o.name));
    const virtual = (o: SchemaRow) => o.type === 'table' && /^CREATE\s+VIRTUAL/i.test(o.sql!);
    for (const o of objs) if (virtual(o)) create(o.sql!);
    for (const o of objs) {
      if (o.type !== 'table' || virtual(o)) continue;
      const exists = all(`SELECT 1 FROM main.sqlite_schema WHERE type = 'table' AND name = '${o.name.replaceAll("'", "''")}'`).length > 0;
      if (!exists) create(o.sql!);
      else run(`DELETE FROM main.${q(o.name)}`); // a shadow table its virtual table just made
      copyRows(db, o.name);
    }
    // src keeps an empty sqlite_sequence once its last AUTOINCREMENT table is gone; main has one only if it has such a table.
    const counters = "SELECT 1 FROM %s.sqlite_schema WHERE name = 'sqlite_sequence'";
    if (all(counters.replace('%s', 'src')).length && all(counters.replace('%s', 'main')).length) {
      // The rows copied into AUTOINCREMENT tables just set counters to their largest id: src's counters replace them.
      run('DELETE FROM main.sqlite_sequence');
      run('INSERT INTO main.sqlite_sequence SELECT * FROM src.sqlite_sequence');
    }
    for (const o of objs) if (o.type === 'index' || o.type === 'trigger' || o.type === 'view') create(o.sql!);
    // PRAGMA user_version is the file's own (a repo cannot set it, so an import or restore is how it comes).
    const userVersion = Number((db.prepare('PRAGMA src.user_version').get() as { user_version: number }).user_version);
    db.exec(`PRAGMA main.user_version = ${Number.isSafeInteger(userVersion) ? userVersion : 0}`);
    if (migrations) {
      run('DELETE FROM main._scopebase_migrations');
      if (all("SELECT 1 FROM src.sqlite_schema WHERE name = '_scopebase_migrations'").length) run('INSERT INTO main._scopebase_migrations SELECT * FROM src._scopebase_migrations');
    }
    for (const t of userTables(db, 'main')) touched.add(t);
    return { tables: [...touched].sort() };
  }
}

/** The user's tables as the user made them: a full-text index by its own name, not its shadow tables (`f_data`, …). */
export function userTables(db: DatabaseSync, schema: 'main' | 'src'): string[] {
  return userTableList(db, schema).map((t) => t.name);
}

/** A user table; a virtual one says so, with its module when its CREATE names it plainly. */
export interface UserTable { name: string; virtual?: true; module?: string }

/** SQLite's own word (`PRAGMA table_list`'s type) on which tables are virtual and which are their shadow tables, by name. */
export function userTableList(db: DatabaseSync, schema: 'main' | 'src'): UserTable[] {
  // The CREATE text is looked up for virtual tables only: sqlite_schema has no index by name.
  const rows = db.prepare(`SELECT l.name, l.type, CASE l.type WHEN 'virtual' THEN (SELECT sql FROM ${schema}.sqlite_schema s WHERE s.type = 'table' AND s.name = l.name) END AS sql
    FROM pragma_table_list l WHERE l.schema = ? AND l.type IN ('table', 'virtual') ORDER BY l.name`).all(schema) as { name: string; type: string; sql: string | null }[];
  return rows.filter((r) => isUser(r.name)).map(({ name, type, sql }) => {
    if (type !== 'virtual') return { name };
    const module = VTABLE_MODULE.exec(sql ?? '')?.[1];
    return module === undefined ? { name, virtual: true } : { name, virtual: true, module: module.toLowerCase() };
  });
}

/** The main schema's shadow tables (a virtual table's storage), as SQLite knows them. */
export function shadowTables(db: DatabaseSync): Set<string> {
  return new Set((db.prepare("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'shadow'").all() as { name: string }[]).map((r) => r.name));
}

// SQLite keeps a virtual table's CREATE as `CREATE VIRTUAL TABLE <name> USING <module>(…)`; the name may be quoted.
const NAME = String.raw`(?:"(?:[^"]|"")*"|\[[^\]]*\]|\x60(?:[^\x60]|\x60\x60)*\x60|'(?:[^']|'')*'|[^\s.(]+)`;
const VTABLE_MODULE = new RegExp(String.raw`^CREATE\s+VIRTUAL\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(?:${NAME}\s*\.\s*)?${NAME}\s+USING\s+(\w+)`, 'i');

/**
 * The name that reaches a table's own rowid, to be copied with its rows: null when the rows carry it already (an
 * INTEGER PRIMARY KEY, or WITHOUT ROWID), or when columns take all three names (no name reaches it then: such a
 * table's rows are renumbered, in order).
 */
export function rowidName(db: DatabaseSync, table: string, schema = 'main'): string | null {
  const list = db.prepare('SELECT wr FROM pragma_table_list WHERE schema = ? AND name = ?').get(schema, table) as { wr: number } | undefined;
  if (!list || list.wr) return null;
  const cols = db.prepare('SELECT name, type, pk FROM pragma_table_xinfo(?, ?)').all(table, schema) as { name: string; type: string; pk: number }[];
  const pks = cols.filter((c) => c.pk > 0);
  if (pks.length === 1 && pks[0]!.type.toUpperCase() === 'INTEGER') return null;
  const taken = new Set(cols.map((c) => c.name.toLowerCase()));
  return ['rowid', '_rowid_', 'oid'].find((n) => !taken.has(n)) ?? null;
}

/** The columns a table stores (generated ones are computed), its rowid first when a name reaches it. */
export function copiedColumns(db: DatabaseSync, table: string, schema = 'main'): string[] {
  const stored = (db.prepare('SELECT name, hidden FROM pragma_table_xinfo(?, ?)').all(table, schema) as { name: string; hidden: number }[]).filter((c) => c.hidden === 0).map((c) => q(c.name));
  const rowid = rowidName(db, table, schema);
  return [...(rowid ? [rowid] : []), ...stored];
}

/** Copies every row, rowids included, of a table with the same definition in `src` and `main`. */
function copyRows(db: DatabaseSync, table: string): void {
  const list = copiedColumns(db, table, 'src').join(', ');
  db.exec(`INSERT INTO main.${q(table)} (${list}) SELECT ${list} FROM src.${q(table)}`);
}
