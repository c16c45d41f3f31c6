// libSQL's `ALTER TABLE t ALTER COLUMN c TO c <definition>` (what drizzle-kit's `turso` dialect generates), with
// libSQL's meaning: the column's type, NOT NULL, DEFAULT, CHECK, COLLATE or REFERENCES change in the table's schema
// and apply to later writes; existing rows are not rewritten, but (stricter than libSQL) must satisfy the new
// constraints, or the statement fails. SQLite's own grammar has no such
// statement, so the definition is changed the way SQLite documents for changes that leave the file format alone
// (https://sqlite.org/lang_altertable.html, "other kinds of table schema changes"): the table's CREATE text is
// rewritten in sqlite_schema inside the request's transaction, and the schema version is bumped.
import { DatabaseSync } from 'node:sqlite';
import { ApiError } from '../../shared/errors.ts';
import { firstOrphan } from './foreign-keys.ts';
import { INTERNAL_PREFIX, assertSchemaClean } from '../sandbox.ts';
import { hasSecondStatement, skipQuotedOrComment, splitStatements } from '../statement-end.ts';
import type { DbHandle } from './handles.ts';
import type { WriteOutcome } from './statements.ts';

const NAME = String.raw`(?:"(?:[^"]|"")+"|\x60(?:[^\x60]|\x60\x60)+\x60|\[[^\]]+\]|[A-Za-z_][\w$]*)`;
const ALTER_COLUMN = new RegExp(String.raw`^\s*ALTER\s+TABLE\s+(?:(?:"main"|main)\s*\.\s*)?(${NAME})\s+ALTER\s+COLUMN\s+(${NAME})\s+TO\s+([\s\S]+?)\s*;?\s*$`, 'i');
/** Cheap test before any parse: only libSQL's ALTER COLUMN has these words. */
export const MENTIONS = /\bALTER\s+COLUMN\s/i;
const LEADING_COMMENTS = /^(?:\s*(?:--[^\n]*(?:\n|$)|\/\*[\s\S]*?\*\/))*/;
/** What would change how rows or index entries are stored: those need a table rebuild. */
const STORAGE = /\b(PRIMARY\s+KEY|UNIQUE|AUTOINCREMENT|GENERATED|AS\s*\()/i;

const unquote = (name: string): string => {
  const c = name[0];
  if (c === '"' || c === '`') return name.slice(1, -1).replaceAll(c + c, c);
  return c === '[' ? name.slice(1, -1) : name;
};

/** The column definitions of a CREATE TABLE text: each one's [start, end) and its name. */
function columnSpans(create: string): { start: number; end: number; name: string }[] {
  const open = create.indexOf('(');
  const spans: { start: number; end: number; name: string }[] = [];
  let depth = 0;
  let start = open + 1;
  for (let i = open; i < create.length; i++) {
    const skipped = skipQuotedOrComment(create, i);
    if (skipped !== null) {
      i = skipped - 1;
      continue;
    }
    const c = create[i];
    if (c === '(') depth++;
    else if (c === ')' || (c === ',' && depth === 1)) {
      if (c === ')' && --depth > 0) continue;
      const item = create.slice(start, i);
      const m = new RegExp(String.raw`^\s*(${NAME})`).exec(item);
      const lead = item.length - item.trimStart().length;
      if (m) spans.push({ start: start + lead, end: i - (item.length - item.trimEnd().length), name: unquote(m[1]!) });
      start = i + 1;
      if (c === ')') break;
    }
  }
  return spans;
}

const bad = (message: string) => new ApiError('sql_error', `ALTER COLUMN: ${message}`);

/** Runs `sql` when it is an ALTER COLUMN (and returns its outcome), or returns null for any other statement. */
export function alterColumn(h: DbHandle, sql: string): WriteOutcome | null {
  const m = ALTER_COLUMN.exec(sql.replace(LEADING_COMMENTS, ''));
  if (!m) return null;
  const table = unquote(m[1]!);
  const column = unquote(m[2]!);
  const definition = m[3]!;
  h.sandbox.mode = 'internal';
  if (table.toLowerCase().startsWith(INTERNAL_PREFIX) || table.toLowerCase().startsWith('sqlite_')) throw new ApiError('not_allowed', `ALTER COLUMN: ${table} is an internal table`);
  const row = h.db.prepare("SELECT sql FROM main.sqlite_schema WHERE type = 'table' AND name = ? COLLATE NOCASE").get(table) as { sql: string } | undefined;
  if (!row) throw bad(`no such table: ${table}`);
  if (/^\s*CREATE\s+VIRTUAL\b/i.test(row.sql)) throw bad(`${table} is a virtual table`);
  checkOneColumn(definition);
  const newName = new RegExp(String.raw`^\s*(${NAME})`).exec(definition);
  if (!newName || unquote(newName[1]!).toLowerCase() !== column.toLowerCase()) throw bad(`the definition must start with the column's own name (${column}); rename a column with ALTER TABLE … RENAME COLUMN`);
  const info = (h.db.prepare('SELECT name, pk, hidden FROM pragma_table_xinfo(?)').all(table) as { name: string; pk: number; hidden: number }[]).find((c) => c.name.toLowerCase() === column.toLowerCase());
  if (!info) throw bad(`no such column: ${table}.${column}`);
  if (info.pk > 0 || info.hidden > 0) throw bad(`${column} is part of the primary key or generated: rebuild the table (create new, copy, drop, rename) to change it`);
  if (STORAGE.test(definition.replace(/'(?:[^']|'')*'/g, "''"))) throw bad('PRIMARY KEY, UNIQUE, AUTOINCREMENT and generated columns change how rows are stored: rebuild the table to add them');
  const span = columnSpans(row.sql).find((s) => s.name.toLowerCase() === column.toLowerCase());
  if (!span) throw bad(`cannot find the definition of ${column} in ${table}'s schema`);
  const created = row.sql.slice(0, span.start) + definition + row.sql.slice(span.end);
  checkDefinition(created, h.db.prepare('SELECT name FROM pragma_table_xinfo(?)').all(table).map((c) => (c as { name: string }).name));
  const collation = (text: string) => (/\bCOLLATE\s+"?(\w+)/i.exec(text)?.[1] ?? 'BINARY').toUpperCase();
  const indexed = h.db.prepare('SELECT 1 FROM pragma_index_list(?) l, pragma_index_info(l.name) i WHERE i.name = ? COLLATE NOCASE LIMIT 1').get(table, column) !== undefined;
  if (indexed && collation(definition) !== collation(row.sql.slice(span.start, span.end))) throw bad(`${column} is indexed, and its index is ordered by its collation: rebuild the table to change it`);
  const version = Number((h.db.prepare('PRAGMA main.schema_version').get() as { schema_version: number }).schema_version);
  h.db.enableDefensive(false);
  try {
    h.db.exec('PRAGMA writable_schema = ON');
    h.db.prepare("UPDATE main.sqlite_schema SET sql = ? WHERE type = 'table' AND name = ? COLLATE NOCASE").run(created, table);
    h.db.exec(`PRAGMA main.schema_version = ${version + 1}`);
  } finally {
    h.db.exec('PRAGMA writable_schema = RESET');
    h.db.enableDefensive(true);
  }
  assertSchemaClean(h.db);
  checkRows(h, table);
  return { text: '{"rowsAffected":0,"lastInsertRowid":null}', rowsAffected: 0, tables: [table] };
}

/** Runs a migration's text: its ALTER COLUMN statements, if any, as above, and the rest as they are. */
export function execMigration(h: DbHandle, sql: string): void {
  if (!MENTIONS.test(sql)) {
    h.db.exec(sql);
    return;
  }
  const { statements, rest } = splitStatements(sql);
  for (const statement of rest ? [...statements, rest] : statements) {
    const mode = h.sandbox.mode;
    if (!alterColumn(h, statement)) h.db.exec(statement);
    h.sandbox.mode = mode;
  }
}

/**
 * Unlike libSQL, existing rows must satisfy the new NOT NULL, CHECK and REFERENCES too: a file that SQLite's own
 * integrity and foreign-key checks flag would fail backup verification and import later. The request's savepoint
 * undoes the change when they do not.
 */
function checkRows(h: DbHandle, table: string): void {
  const problems = (h.db.prepare('SELECT quick_check AS p FROM pragma_quick_check(?) LIMIT 3').all(table) as { p: string }[]).map((r) => r.p).filter((p) => p !== 'ok');
  if (problems.length) throw new ApiError('constraint_violation', `ALTER COLUMN: existing rows break the new definition (${problems.join('; ')}); update them first`, { sqliteCode: 'SQLITE_CONSTRAINT' });
  const orphan = firstOrphan(h, table);
  if (orphan) throw new ApiError('constraint_violation', `ALTER COLUMN: existing rows of ${table} refer to missing rows of ${orphan.parent}; update them first`, { sqliteCode: 'SQLITE_CONSTRAINT_FOREIGNKEY' });
}

/**
 * The definition must be one column's and nothing else: no comment (it would hide the rest of the CREATE text), no
 * `,` or `;` outside parentheses, and parentheses and quotes that close.
 */
function checkOneColumn(definition: string): void {
  let depth = 0;
  for (let i = 0; i < definition.length; i++) {
    const c = definition[i]!;
    if ((c === '-' && definition[i + 1] === '-') || (c === '/' && definition[i + 1] === '*')) throw bad('comments are not allowed in the new definition');
    const skipped = skipQuotedOrComment(definition, i);
    if (skipped !== null) {
      if (skipped > definition.length) throw bad('a quote in the new definition is not closed');
      i = skipped - 1;
      continue;
    }
    if (c === '(') depth++;
    else if (c === ')' && --depth < 0) throw bad('the new definition closes a parenthesis it did not open');
    else if ((c === ',' || c === ';') && depth === 0) throw bad('the new definition must be one column\'s, without "," or ";"');
  }
  if (depth !== 0) throw bad('a parenthesis in the new definition is not closed');
}

/** The rewritten CREATE TABLE must be valid SQL with the same columns in the same order: tried on an empty in-memory database. */
function checkDefinition(created: string, columns: string[]): void {
  const probe = new DatabaseSync(':memory:');
  try {
    if (hasSecondStatement(created)) throw bad('the new definition must be one column\'s');
    probe.prepare(created).run();
    const now = probe.prepare("SELECT p.name FROM sqlite_schema s, pragma_table_xinfo(s.name) p WHERE s.type = 'table' AND s.name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").all().map((c) => (c as { name: string }).name);
    if (now.join('\0') !== columns.join('\0')) throw bad(`the table's columns would change (${columns.join(', ')} → ${now.join(', ')})`);
  } catch (e) {
    if (e instanceof ApiError) throw e;
    throw bad(`the new definition is not valid: ${(e as Error).message}`);
  } finally {
    if (probe.isOpen) probe.close();
  }
}
