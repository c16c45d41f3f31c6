// SPEC 4.12 export, executor side: a consistent copy (VACUUM INTO, one read transaction) made clean — no internal
// table, rollback-journal mode so any sqlite3 opens it — or written out as SQL text in the style of `sqlite3 .dump`.
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { removeCopy } from '../history/rebuild.ts';
import { DatabaseSync } from 'node:sqlite';
import { pathToFileURL } from 'node:url';
import { INTERNAL_PREFIX } from '../sandbox.ts';
import type { DbHandle } from './handles.ts';
import type { Reply } from './reply.ts';
import { copiedColumns, copyContent, shadowTables } from './install.ts';
import { terminated } from '../statement-end.ts';

const q = (name: string) => `"${name.replaceAll('"', '""')}"`;
const isUser = (name: string) => !name.toLowerCase().startsWith(INTERNAL_PREFIX) && !name.startsWith('sqlite_');

/** A value as a SQL literal that reads back as the same value and type. */
export function sqlLiteral(v: unknown): string {
  if (v === null) return 'NULL';
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'number') {
    if (Number.isNaN(v)) return 'NULL';
    if (!Number.isFinite(v)) return v > 0 ? '1e999' : '-1e999';
    const s = Object.is(v, -0) ? '-0.0' : String(v);
    return /[.eE]/.test(s) ? s : `${s}.0`; // stays REAL
  }
  if (typeof v === 'string') {
    const text = `'${v.replaceAll("'", "''")}'`;
    return v.includes('\0') ? `CAST(X'${Buffer.from(v, 'utf8').toString('hex')}' AS TEXT)` : text;
  }
  if (v instanceof Uint8Array) return `X'${Buffer.from(v).toString('hex')}'`;
  throw new Error(`cannot write ${typeof v} as SQL`);
}

/** A column as the dump reads it: TEXT as its bytes (a string would turn bytes that are not UTF-8 into U+FFFD), BLOB as hex. */
const asRead = (column: string) => `CASE typeof(${column}) WHEN 'text' THEN CAST(${column} AS BLOB) WHEN 'blob' THEN hex(${column}) ELSE ${column} END`;

/** A value read through asRead as a SQL literal: TEXT that is not UTF-8, or holds NUL, as CAST(X'…' AS TEXT). */
function dumpLiteral(v: unknown): string {
  if (typeof v === 'string') return `X'${v.toLowerCase()}'`;
  if (!(v instanceof Uint8Array)) return sqlLiteral(v);
  const bytes = Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  return isUtf8(bytes) && !bytes.includes(0) ? sqlLiteral(bytes.toString('utf8')) : `CAST(X'${bytes.toString('hex')}' AS TEXT)`;
}

/** Writes the SQL text of a database file to `target`, in chunks (a dump is never held whole in memory). */
function writeDump(copy: DatabaseSync, target: string): void {
  const fd = openSync(target, 'w', 0o600);
  let buf: string[] = [];
  let size = 0;
  const out = (line: string) => {
    buf.push(line);
    size += line.length;
    if (size > 1 << 20) flush();
  };
  const flush = () => {
    writeSync(fd, buf.join(''));
    buf = [];
    size = 0;
  };
  try {
    const schema = copy.prepare('SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid').all() as { type: string; name: string; sql: string }[];
    // SQLite's own word on shadow tables: a user table named like one (`docs_notes` beside `docs`) is the user's.
    const shadow = shadowTables(copy);
    // SPEC 4.12: schema, then rows. Every table first; then every row; then indexes, views and triggers, in the
    // order they were made, so an import builds each index once and fires no trigger on the rows it loads.
    const tables = schema.filter((o) => o.type === 'table' && isUser(o.name) && !shadow.has(o.name));
    out('PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\n');
    for (const o of tables) {
      if (CONTENTLESS.test(o.sql)) dumpWithShadows(copy, o, schema.filter((s) => shadow.has(s.name) && isShadowOf(s.name, o.name)), out);
      else out(`${terminated(o.sql)}\n`);
    }
    for (const o of tables) {
      if (CONTENTLESS.test(o.sql)) continue; // its rows are its shadow tables', dumped with it
      // Rows keep their rowids; a virtual table's go in through the table itself (its index is rebuilt).
      const list = copiedColumns(copy, o.name);
      const stmt = copy.prepare(`SELECT ${list.map(asRead).join(', ')} FROM ${q(o.name)}`);
      stmt.setReadBigInts(true);
      stmt.setReturnArrays(true);
      const into = `INSERT INTO ${q(o.name)}(${list.join(',')}) VALUES(`;
      for (const row of stmt.iterate() as Iterable<unknown[]>) out(`${into}${row.map(dumpLiteral).join(',')});\n`);
    }
    if (schema.some((o) => o.name === 'sqlite_sequence')) {
      const counters = copy.prepare('SELECT name, seq FROM sqlite_sequence');
      counters.setReadBigInts(true); // a counter past 2^53 read as a number came back lower: an import then reused ids
      const seq = counters.all() as { name: string; seq: unknown }[];
      if (seq.length) out(`DELETE FROM sqlite_sequence;\n${seq.map((r) => `INSERT INTO sqlite_sequence VALUES(${sqlLiteral(r.name)},${sqlLiteral(r.seq)});\n`).join('')}`);
    }
    for (const o of schema) if ((o.type === 'index' || o.type === 'trigger' || o.type === 'view') && isUser(o.name)) out(`${terminated(o.sql)}\n`);
    out('COMMIT;\n');
    flush();
  } finally {
    closeSync(fd);
  }
}

/**
 * A full-text table that keeps no copy of its text (`content=''`): its rows read back as NULL (fts5) or not at all
 * (fts4), so dumped as rows its index was lost (or the export failed): it is dumped as sqlite3 .dump does, below.
 */
const CONTENTLESS = /^CREATE\s+VIRTUAL\s+TABLE\b[\s\S]*?\bUSING\s+["'`[]?fts[345]\b[\s\S]*\bcontent\s*=\s*(?:''|""|``)/i;

/** A shadow table of `table` by its name: `<table>_<suffix>`, the suffix one word (`f_x_data` is `f_x`'s). */
const isShadowOf = (name: string, table: string) => name.toLowerCase().startsWith(`${table.toLowerCase()}_`) && /^[a-z0-9]+$/i.test(name.slice(table.length + 1));

/**
 * sqlite3 .dump's form of a virtual table: its schema row written under writable_schema, then its shadow tables and
 * their rows, which hold the index (the import reads this form: load-sql.ts).
 */
function dumpWithShadows(copy: DatabaseSync, o: { name: string; sql: string }, shadows: { name: string; sql: string }[], out: (line: string) => void): void {
  out(`PRAGMA writable_schema=ON;\nINSERT INTO sqlite_schema(type,name,tbl_name,rootpage,sql)VALUES('table',${sqlLiteral(o.name)},${sqlLiteral(o.name)},0,${sqlLiteral(o.sql)});\n`);
  for (const s of shadows) {
    out(`${terminated(s.sql.replace(/^CREATE\s+TABLE\s+/i, 'CREATE TABLE IF NOT EXISTS '))}\n`);
    const cols = (copy.prepare('SELECT name FROM pragma_table_xinfo(?) WHERE hidden = 0').all(s.name) as { name: string }[]).map((c) => q(c.name));
    const stmt = copy.prepare(`SELECT ${cols.map(asRead).join(', ')} FROM ${q(s.name)}`);
    stmt.setReadBigInts(true);
    stmt.setReturnArrays(true);
    for (const row of stmt.iterate() as Iterable<unknown[]>) out(`INSERT INTO ${q(s.name)} VALUES(${row.map(dumpLiteral).join(',')});\n`);
  }
  out('PRAGMA writable_schema=OFF;\n');
}

/**
 * Exports the database into `target` (a clean SQLite file, or SQL text); the reply names the version it holds.
 * The copy is made row by row in one read transaction of the live file (rowids kept: VACUUM INTO renumbers the rows
 * of tables without an INTEGER PRIMARY KEY), into a new file that never held an internal table.
 */
export function exportDatabase(h: DbHandle, target: string, format: 'sqlite' | 'sql'): Reply {
  const file = format === 'sqlite' ? target : `${target}.sqlite`;
  for (const left of new Set([target, file])) rmSync(left, { force: true }); // by a process that died making them (the read runs once more)
  const copy = new DatabaseSync(file, { enableForeignKeyConstraints: false });
  try {
    copy.enableDefensive(false); // full-text indexes are copied through their shadow tables
    const live = pathToFileURL(h.path);
    live.searchParams.set('mode', 'ro');
    copy.prepare('ATTACH DATABASE ? AS src').run(live.href);
    copy.exec('BEGIN');
    const version = Number((copy.prepare("SELECT value FROM src._scopebase_meta WHERE key = 'version'").get() as { value: number }).value);
    // Not in the clean copy (no internal table): told beside it, so an import elsewhere can baseline up to it.
    const last = copy.prepare('SELECT id FROM src._scopebase_migrations ORDER BY seq DESC LIMIT 1').get() as { id: string } | undefined;
    copyContent(copy, false);
    copy.exec('COMMIT');
    copy.exec('DETACH DATABASE src');
    if (format === 'sql') writeDump(copy, target);
    return { status: 200, body: JSON.stringify({ path: target, version, lastMigration: last?.id ?? null }) };
  } finally {
    copy.close();
    if (format === 'sql') removeCopy(file);
  }
}
