// Runs one user statement and renders its result as JSON text, counting bytes against the request's result limit.
import type { StatementSync } from 'node:sqlite';
import { ApiError } from '../../shared/errors.ts';
import { decodeParams, encodeRow, encodeValue, type Params } from '../values.ts';
import type { DbHandle, Prepared } from './handles.ts';
import { bindNamed, checkParams, type ParamSlots } from '../params.ts';
import { deferForeignKeys } from './foreign-keys.ts';
import { assertSchemaClean, ordinaryTables } from '../sandbox.ts';
import { MENTIONS, alterColumn } from './alter-column.ts';
import { hranaCols, hranaEmpty, hranaResult, hranaRow } from './hrana-result.ts';
import type { KeyWatch } from './key-cover.ts';

export interface StatementSpec {
  sql: string;
  params?: unknown;
}

const ADVICE = 'select fewer rows or columns, or page with LIMIT';

/**
 * SPEC 4.8: the reply's bytes (UTF-8, as sent) against DB_MAX_RESULT_BYTES, or what is left of a libSQL pipeline's
 * allowance. Rows are charged as they are rendered, with what is known to be around them, so an endless result stops
 * early; the whole reply is then measured exactly (`check`): one of exactly the limit passes, one byte more does not.
 */
export class ResultBudget {
  private readonly limit: number;
  private readonly max: number;
  /** Bytes the reply holds at least (rows with their commas, columns): never more than it will hold. */
  private used = 0;

  /** `left`: what is left of a libSQL pipeline's allowance (set by the service), when that is less. */
  constructor(max: number, left?: number) {
    this.max = max;
    this.limit = Math.min(max, left ?? Infinity);
  }

  /** Counts the text's UTF-8 bytes (a '€' is 3 bytes, not 1 UTF-16 unit), and `more` known to be around it. */
  charge(text: string, more = 0): void {
    this.used += Buffer.byteLength(text, 'utf8') + more;
    if (this.used > this.limit) throw this.over(null);
  }

  /** Whether `bytes` more fit. */
  holds(bytes: number): boolean {
    return this.used + bytes <= this.limit;
  }

  /** Throws, before a row is rendered, when what it will take at least (`bytes`) cannot fit: its text is never made. */
  fits(bytes: number): void {
    if (!this.holds(bytes)) throw this.over(null);
  }

  /** The whole reply, measured: returned as it is if within the limit. */
  check(reply: string): string {
    const bytes = Buffer.byteLength(reply, 'utf8');
    if (bytes > this.limit) throw this.over(bytes);
    return reply;
  }

  private over(bytes: number | null): ApiError {
    const limit = this.limit < this.max ? `what is left of this libSQL pipeline's DB_MAX_RESULT_BYTES (${this.limit} of ${this.max} bytes)` : `DB_MAX_RESULT_BYTES (${this.limit} bytes)`;
    const message = bytes === null ? `the reply is over ${limit} at this statement's rows: ${ADVICE}` : `the reply would be ${bytes} bytes, over ${limit}: ${ADVICE}`;
    return new ApiError('result_too_large', message, bytes === null ? { maxResultBytes: this.limit } : { maxResultBytes: this.limit, replyBytes: bytes });
  }
}

/** The reply as a whole was over the limit: it failed at its end, not at a statement's rows. */
export const replyTooLarge = (e: unknown): boolean => e instanceof ApiError && e.code === 'result_too_large' && (e.details as { replyBytes?: unknown } | undefined)?.replyBytes !== undefined;

function bind(p: Params | undefined, slots: ParamSlots): unknown[] {
  if (p === undefined) return [];
  return Array.isArray(p) ? p : [bindNamed(slots, p)];
}

interface Rendered {
  json: string;
  count: number;
}

/** Thrown when a number read without BigInts may be an integer past ±(2^53−1): the rows are read again as BigInt. */
const UNSAFE = new Error('an integer past 2^53 was read as a number');

/** node:sqlite reads an integer exactly representable as a double (INT64_MIN, 2^60) as a number without complaint. */
function checkSafe(v: unknown): void {
  if (typeof v === 'number' && (v > Number.MAX_SAFE_INTEGER || v < Number.MIN_SAFE_INTEGER) && Number.isInteger(v)) throw UNSAFE;
}

/**
 * How results come out: `arrays` and `objects` as SPEC 4.3 says; `hrana` (set by the service for the libSQL
 * protocol, never by a client) as the protocol's own StmtResult, typed values and declared types included.
 */
export type RowShape = 'arrays' | 'objects' | 'hrana';

/** `bigints`: integers arrive as BigInt, so a number is a REAL and needs no check. */
function renderRows(stmt: StatementSync, args: unknown[], shape: RowShape, budget: ResultBudget, bigints: boolean): Rendered {
  const rows = stmt.iterate(...(args as []));
  try {
    return renderEach(rows, shape, budget, bigints);
  } catch (e) {
    // A step that failed leaves the (cached) statement holding its error until reset: its next run, with other
    // values, would fail with this error (a false 409 for the next insert). Ending the iterator resets it.
    try {
      rows.return?.();
    } catch {
      // the statement's own error is the one to report
    }
    throw e;
  }
}

/**
 * The least a row's values take in the reply (a string's UTF-16 units, a blob's base64): a row of a dozen 8 MB values
 * rendered whole made one JSON text past V8's longest string (2^29 characters), a RangeError answered 500.
 */
function rowBytesAtLeast(row: unknown): number {
  let n = 0;
  if (Array.isArray(row)) for (let i = 0; i < row.length; i++) n += valueBytesAtLeast(row[i]);
  else for (const k in row as object) n += valueBytesAtLeast((row as Record<string, unknown>)[k]);
  return n;
}

const valueBytesAtLeast = (v: unknown): number => (typeof v === 'string' ? v.length : ArrayBuffer.isView(v) ? Math.ceil(v.byteLength / 3) * 4 : 0);

function renderEach(rows: Iterator<unknown>, shape: RowShape, budget: ResultBudget, bigints: boolean): Rendered {
  const parts: string[] = [];
  for (let next = rows.next(); !next.done; next = rows.next()) {
    const row = next.value;
    budget.fits(rowBytesAtLeast(row));
    let text: string;
    if (shape === 'objects') {
      const o = row as Record<string, unknown>;
      for (const k in o) {
        const v = o[k];
        if ((v !== null && typeof v === 'object') || typeof v === 'bigint' || v === 0) o[k] = encodeValue(v); // -0.0 too
        else if (!bigints) checkSafe(v);
      }
      text = JSON.stringify(o);
    } else if (shape === 'hrana') {
      text = hranaRow(row as unknown as unknown[]);
    } else {
      const values = row as unknown as unknown[];
      if (!bigints) for (let i = 0; i < values.length; i++) checkSafe(values[i]);
      text = JSON.stringify(encodeRow(values));
    }
    budget.charge(text, 1); // and the comma (or bracket) after it
    parts.push(text);
  }
  return { json: `[${parts.join(',')}]`, count: parts.length };
}

/** Renders rows; an integer past ±(2^53−1) makes the statement be read again as BigInt (a REAL stays a number). */
function rowsOf(stmt: StatementSync, args: unknown[], shape: RowShape, budget: ResultBudget, bigints: boolean): Rendered {
  stmt.setReturnArrays(shape !== 'objects');
  if (bigints || shape === 'hrana') {
    stmt.setReadBigInts(true);
    return renderRows(stmt, args, shape, budget, true);
  }
  stmt.setReadBigInts(false);
  try {
    return renderRows(stmt, args, shape, budget, false);
  } catch (e) {
    if (e !== UNSAFE && (e as { code?: string }).code !== 'ERR_OUT_OF_RANGE') throw e;
    stmt.setReadBigInts(true);
    return renderRows(stmt, args, shape, budget, true);
  }
}

function columnsOf(stmt: StatementSync): string {
  return `"columns":${JSON.stringify(stmt.columns().map((c) => c.name))}`;
}

/** A read (/_db/query): `{"columns":[...],"rows":[...]}`. */
export function runRead(h: DbHandle, spec: StatementSpec, index: number, shape: RowShape, budget: ResultBudget): string {
  const since = shape === 'hrana' ? performance.now() : 0; // query_duration_ms, for the libSQL protocol only
  const params = decodeParams(spec.params, `statements[${index}]`, shape === 'hrana');
  let p!: Prepared;
  let args!: unknown[];
  // Prepared and run (a statement prepared before may be prepared again as it starts, after a schema change)
  // through DbHandle.read: a virtual table connected by it is not the read's write.
  const rows = h.read(() => {
    p = h.prepare(spec.sql, 'read');
    checkParams(p.params, spec.params, index);
    args = bind(params, p.params);
    if (!p.returnsRows) {
      p.stmt.run(...(args as [])); // a read-only statement without a result (e.g. an empty PRAGMA) still runs, for its errors
      return null;
    }
    return rowsOf(p.stmt, args, shape, budget, false).json;
  });
  if (rows === null) return shape === 'hrana' ? hranaEmpty(since) : '{"columns":[],"rows":[]}';
  const cols = shape === 'hrana' ? hranaCols(p.stmt) : columnsOf(p.stmt);
  budget.charge(cols);
  return shape === 'hrana' ? hranaResult(cols, rows, 0, null, since) : `{${cols},"rows":${rows}}`;
}

export interface WriteOutcome {
  text: string;
  rowsAffected: number;
  tables: string[];
  /** It wrote rows no changeset shows (Sandbox.untracked). */
  untracked?: boolean;
  /** It may have left the rows it touched as they were (Prepared.rewrites): only then can a request change nothing. */
  rewrites?: boolean;
}

/** A rowid no user insert makes (SQLite's smallest): last_insert_rowid() still holding it means nothing was inserted. */
const NO_INSERT = -(2n ** 63n);

/**
 * Before a statement that may or may not insert (an upsert that takes DO UPDATE, REPLACE): sets last_insert_rowid()
 * to NO_INSERT, else it would report the previous insert's rowid (the change log's, a statement earlier). The temp
 * table is the connection's own.
 */
function markNoInsert(h: DbHandle): void {
  h.internal('CREATE TEMP TABLE IF NOT EXISTS _scopebase_rowid(x)').run();
  h.internal(`INSERT OR REPLACE INTO temp._scopebase_rowid(rowid, x) VALUES (${NO_INSERT}, NULL)`).run();
}

/**
 * The statement's lastInsertRowid: null unless it inserted into a user table (SPEC 4.4). A full-text command inserts
 * no row, yet SQLite sets last_insert_rowid() to 0 for it; a row inserted in the command's form (a NULL command) with
 * a rowid of 0 is taken for one.
 */
function insertedRowid(p: Prepared, changes: number, rowid: () => number | bigint): number | bigint | null {
  if (!p.inserts || changes === 0) return null;
  const id = rowid();
  return BigInt(id) === NO_INSERT || (p.command && BigInt(id) === 0n) ? null : id;
}

/** last_insert_rowid() read as a BigInt: a rowid past ±(2^53−1) is not a JavaScript number (SPEC 4.2's $bigint). */
function lastInsertRowid(h: DbHandle): bigint {
  const stmt = h.internal('SELECT last_insert_rowid() AS id');
  stmt.setReadBigInts(true);
  return stmt.get()!.id as bigint;
}

/**
 * A statement of /_db/execute: rowsAffected, lastInsertRowid, and rows when it returns any. `beforeRun`: told what was
 * prepared, just before SQLite runs it (an interactive transaction's savepoint around it, tx-ops.ts).
 */
export function runWrite(h: DbHandle, spec: StatementSpec, index: number, shape: RowShape, budget: ResultBudget, watch: KeyWatch, beforeRun?: (p: Prepared) => void): WriteOutcome {
  const since = shape === 'hrana' ? performance.now() : 0; // query_duration_ms, for the libSQL protocol only
  const params = decodeParams(spec.params, `statements[${index}]`, shape === 'hrana');
  if (MENTIONS.test(spec.sql)) {
    const altered = alterColumn(h, spec.sql);
    if (altered) return shape === 'hrana' ? { ...altered, text: hranaEmpty(since) } : altered;
  }
  const p: Prepared = h.prepare(spec.sql, 'write');
  checkParams(p.params, spec.params, index);
  const args = bind(params, p.params);
  watch.enter(p.written, p.schema); // the schema version prepare just read
  if (p.defersForeignKeys) deferForeignKeys(h);
  if (p.inserts && (p.rewrites || p.noRowid)) markNoInsert(h);
  beforeRun?.(p);
  let ordinary: Set<string> | undefined;
  if (p.checksSchema) {
    h.sandbox.mode = 'internal';
    ordinary = ordinaryTables(h.db); // a full-text table may take one over (sandbox.ts assertNoTakeover)
  }
  const length = h.writeLength(p.schema); // DB_MAX_VALUE_BYTES with a record's room, not the connection's 18 KB
  h.sandbox.mode = 'write'; // the internal statements above switched it: a re-prepare while this runs is a write's
  if (p.returnsRows) {
    const rows = h.writing(length, () => rowsOf(p.stmt, args, shape, budget, true));
    // SQLite's own count, as without RETURNING: an INSERT into a view returns its rows, but its INSTEAD OF trigger
    // did the inserting (the rows returned, and last_insert_rowid() an internal insert's, were reported).
    const count = p.dml ? Number(h.internal('SELECT changes() AS n').get()!.n) : 0;
    const rowid = insertedRowid(p, count, () => lastInsertRowid(h));
    const cols = shape === 'hrana' ? hranaCols(p.stmt) : columnsOf(p.stmt);
    budget.charge(cols);
    const text = shape === 'hrana'
      ? hranaResult(cols, rows.json, count, rowid, since)
      : `{"rowsAffected":${count},"lastInsertRowid":${JSON.stringify(encodeValue(rowid))},${cols},"rows":${rows.json}}`;
    return { text, rowsAffected: count, tables: p.written, untracked: p.untracked, rewrites: p.rewrites };
  }
  p.stmt.setReadBigInts(true);
  const r = h.writing(length, () => p.stmt.run(...(args as [])));
  if (p.checksSchema) {
    h.sandbox.mode = 'internal';
    assertSchemaClean(h.db, ordinary);
  }
  const changes = p.dml ? Number(r.changes) : 0;
  const rowid = insertedRowid(p, changes, () => r.lastInsertRowid);
  const text = shape === 'hrana' ? hranaResult('"cols":[]', '[]', changes, rowid, since) : `{"rowsAffected":${changes},"lastInsertRowid":${JSON.stringify(encodeValue(rowid))}}`;
  budget.charge(text);
  return { text, rowsAffected: changes, tables: p.written, untracked: p.untracked, rewrites: p.rewrites };
}
