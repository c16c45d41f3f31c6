// SPEC 4.12 import of SQL text: a dump runs statement by statement under the sandbox into a new database, which is
// then installed like an imported file (history-ops.ts). `sqlite3 .dump` writes a virtual table as a row forced into
// sqlite_schema under `PRAGMA writable_schema=ON`, then its shadow tables and their rows: that exact form is run as
// the CREATE VIRTUAL TABLE it holds (allowed modules only) with the shadow rows loaded as dumped; writable_schema
// itself is never allowed.
import { readFileSync } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { ApiError, type ErrorCode } from '../../shared/errors.ts';
import { firstOrphan, orphanError } from './foreign-keys.ts';
import { assertSchemaClean } from '../sandbox.ts';
import { hasSecondStatement, isBlank, splitStatements } from '../statement-end.ts';
import { DbHandle, type ExecutorLimits } from './handles.ts';
import { failure } from './reply.ts';

/** The dump's own transaction and foreign-key lines: the import's, skipped. */
const IMPORTS_OWN = /^(?:(?:BEGIN|COMMIT|END)(?:\s+TRANSACTION)?|PRAGMA\s+foreign_keys\s*=\s*(?:OFF|ON|0|1))\s*;?$/i;
const WRITABLE_SCHEMA = /^PRAGMA\s+writable_schema\s*=\s*(ON|OFF|1|0)\s*;?$/i;
const LITERAL = "'((?:[^']|'')*)'";
/** What the shell writes for a virtual table (shell.c dump_callback; sqlite_master before SQLite 3.33). */
const DUMPED_VTAB = new RegExp(`^INSERT\\s+INTO\\s+sqlite_(?:schema|master)\\s*\\(\\s*type\\s*,\\s*name\\s*,\\s*tbl_name\\s*,\\s*rootpage\\s*,\\s*sql\\s*\\)\\s*VALUES\\s*\\(\\s*'table'\\s*,\\s*${LITERAL}\\s*,\\s*${LITERAL}\\s*,\\s*0\\s*,\\s*${LITERAL}\\s*\\)\\s*;?$`, 'is');
const NAME = String.raw`("(?:[^"]|"")+"|'(?:[^']|'')+'|\[[^\]]+\]|` + '`[^`]+`' + String.raw`|[A-Za-z_][\w$]*)`;
const SHADOW_CREATE = new RegExp(String.raw`^CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?${NAME}`, 'i');
const SHADOW_ROW = new RegExp(String.raw`^INSERT\s+INTO\s+${NAME}\s*VALUES\s*\(`, 'i');

const unquote = (name: string) => (/^["'`[]/.test(name) ? name.slice(1, -1).replace(/""|''|``/g, (m) => m[0]!) : name).toLowerCase();
const q = (name: string) => `"${name.replaceAll('"', '""')}"`;

/** V8's longest string: 2^29 − 24 UTF-16 code units. */
const MAX_TEXT_CHARS = 2 ** 29 - 24;

/**
 * The upload as text, strictly UTF-8: a lenient read would load U+FFFD in place of the bytes that are not (a dump of
 * TEXT holding such bytes, as sqlite3 .dump writes it raw), and the import would not be the content it was sent.
 */
function readSqlText(path: string): string {
  const bytes = readFileSync(path);
  if (bytes.subarray(0, 16).toString('latin1') === 'SQLite format 3\0') throw new ApiError('invalid_request', 'the body is a SQLite database file, not SQL text: send it as Content-Type: application/vnd.sqlite3');
  if (bytes[0] === 0x1f && bytes[1] === 0x8b) throw new ApiError('invalid_request', 'the body is gzip-compressed: decompress it (gunzip) and send the SQL text');
  if (isUtf8(bytes)) {
    try {
      return new TextDecoder().decode(bytes); // a leading byte-order mark is dropped
    } catch (e) {
      // V8 makes no string past 2^29 − 24 characters: the text could not be read whole (it answered 400 sql_error).
      if ((e as { code?: unknown }).code !== 'ERR_STRING_TOO_LONG') throw e;
      throw new ApiError('payload_too_large', `the SQL text is ${bytes.length} bytes, more characters than this server reads as one text (${MAX_TEXT_CHARS}): import the SQLite file itself (Content-Type: application/vnd.sqlite3), or the dump in parts`, { maxSqlTextChars: MAX_TEXT_CHARS });
    }
  }
  let line = 1;
  for (let start = 0; ; line++) {
    const end = bytes.indexOf(10, start); // a newline byte is never inside a multi-byte character
    if (!isUtf8(bytes.subarray(start, end < 0 ? bytes.length : end)) || end < 0) break;
    start = end + 1;
  }
  throw new ApiError('invalid_request', `the SQL text is not valid UTF-8 (line ${line}): import the SQLite file itself, or a dump that writes such TEXT as CAST(X'…' AS TEXT), as export --format sql does`);
}

/** Runs one statement of the text as user SQL: under the sandbox's write mode, whatever ran before it. */
function asUser(h: DbHandle, sql: string): void {
  h.sandbox.mode = 'write';
  h.sandbox.denied = null;
  // One statement, prepared: exec would run whatever a text the splitter read differently from SQLite hides after it.
  if (hasSecondStatement(sql)) throw new ApiError('sql_error', 'the statement holds more than one statement as SQLite reads it');
  if (isBlank(sql)) return; // nothing but comments
  h.checkBlobLiterals(sql);
  h.db.prepare(sql).run();
}

/** The `.dump` form of virtual tables, followed through one text. */
class DumpedVirtualTables {
  /** Between `PRAGMA writable_schema=ON` and `=OFF`, where the shell writes virtual tables. */
  open = false;
  /** Virtual tables made from the form, whose shadow tables' rows come from the text. */
  readonly tables: string[] = [];
  /** Their shadow tables (lowercase), and whether the rows their module wrote at creation are removed yet. */
  readonly shadows = new Map<string, { name: string; emptied: boolean }>();

  /** Runs a dumped virtual table's CREATE itself: its shadow tables are made by the module, as in any CREATE. */
  create(h: DbHandle, sql: string): void {
    if (hasSecondStatement(sql)) throw new ApiError('sql_error', 'the sqlite_schema row of a virtual table holds more than one statement');
    const before = new Set(this.listed(h).map((t) => t.name));
    asUser(h, sql);
    for (const t of this.listed(h)) {
      if (before.has(t.name)) continue;
      if (t.type === 'virtual') this.tables.push(t.name);
      else if (t.type === 'shadow') this.shadows.set(t.name.toLowerCase(), { name: t.name, emptied: false });
    }
  }

  /** A shadow row as dumped: the rows the module wrote when it made the table give way to the dump's. */
  insert(h: DbHandle, sql: string, shadow: { name: string; emptied: boolean }): void {
    h.db.enableDefensive(false); // defensive mode makes shadow tables read-only; for this one statement only
    try {
      if (!shadow.emptied) h.internal(`DELETE FROM main.${q(shadow.name)}`).run();
      shadow.emptied = true;
      asUser(h, sql);
    } finally {
      h.db.enableDefensive(true);
    }
  }

  /** Rows loaded into shadow tables must be an index SQLite can use: its integrity check judges them. */
  check(h: DbHandle): void {
    for (const name of this.tables) {
      const rows = h.internal(`PRAGMA main.integrity_check(${q(name)})`).all() as { integrity_check: string }[];
      const bad = rows.map((r) => r.integrity_check).filter((r) => r !== 'ok');
      if (bad.length) throw new ApiError('invalid_request', `the dumped rows of virtual table ${name} are not a sound index: ${bad.join('; ').slice(0, 300)}`);
    }
  }

  private listed(h: DbHandle): { name: string; type: string }[] {
    return h.internal("SELECT name, type FROM pragma_table_list WHERE schema = 'main'").all() as { name: string; type: string }[];
  }
}

/**
 * Runs a SQL text (a dump) into a new database under the sandbox; the dump's own BEGIN/COMMIT are the import's.
 * Foreign keys are off while it runs, as in sqlite3 (no ON DELETE action runs); a dangling reference refuses the whole text.
 */
export function loadSql(sqlPath: string, target: string, limits: ExecutorLimits, step: (done?: boolean) => void): void {
  const h = new DbHandle(target, true, { ...limits, history: undefined });
  try {
    const { statements, rest } = splitStatements(readSqlText(sqlPath));
    if (rest) statements.push(rest);
    // A dump makes every table before any row (SPEC 4.12), so a row may refer to one its table's turn has not
    // loaded yet: with foreign keys off, as the dump itself asks and sqlite3 loads it, references are checked once,
    // when the whole text has run (deferred, a parent's insert looked for children, and failed on a key SQLite can
    // never check: "foreign key mismatch").
    h.internal('PRAGMA foreign_keys = OFF').run(); // this connection is the load's alone, closed after it
    h.internal('BEGIN IMMEDIATE').run();
    const dumped = new DumpedVirtualTables();
    statements.forEach((sql, i) => {
      if (IMPORTS_OWN.test(sql)) return;
      const writable = WRITABLE_SCHEMA.exec(sql);
      if (writable) {
        dumped.open = /^(ON|1)$/i.test(writable[1]!);
        return;
      }
      step();
      try {
        const vtab = dumped.open ? DUMPED_VTAB.exec(sql) : null;
        const shadowName = dumped.open ? (SHADOW_ROW.exec(sql) ?? SHADOW_CREATE.exec(sql))?.[1] : undefined;
        const shadow = shadowName === undefined ? undefined : dumped.shadows.get(unquote(shadowName));
        if (vtab && vtab[1] === vtab[2] && /^CREATE\s+VIRTUAL\s+TABLE\s/i.test(vtab[3]!)) dumped.create(h, vtab[3]!.replaceAll("''", "'"));
        else if (shadow && SHADOW_ROW.test(sql)) dumped.insert(h, sql, shadow);
        else if (!shadow) asUser(h, sql); // else the CREATE of a shadow table its virtual table made: nothing to do
      } catch (e) {
        const reply = failure(e, h.sandbox.denied, i);
        const err = JSON.parse(reply.body).error as { code: ErrorCode; message: string };
        throw new ApiError(err.code, `statement ${i} of the SQL text: ${err.message}`, { statement: i });
      }
    });
    step(true);
    h.sandbox.mode = 'internal';
    dumped.check(h);
    assertSchemaClean(h.db); // what the text built obeys the file's rules: nothing on internals, no trigger on a shadow table
    const orphan = firstOrphan(h);
    if (orphan) throw orphanError(orphan);
    h.internal('COMMIT').run();
  } finally {
    h.close();
  }
}
