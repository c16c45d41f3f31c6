// Hrana's values and results (HRANA_3_SPEC "Values", "Statement results") to and from scopebase's JSON (SPEC 4.2):
// integers travel as decimal strings there, as numbers or {"$bigint"} here; blobs as {"base64"} there, {"$blob"} here.
import { ApiError } from '../../shared/errors.ts';

export type HranaValue =
  | { type: 'null' }
  | { type: 'integer'; value: string }
  | { type: 'float'; value: number }
  | { type: 'text'; value: string }
  | { type: 'blob'; base64: string };

export interface HranaStmt {
  sql?: string | null;
  sql_id?: number | null;
  args?: HranaValue[];
  named_args?: { name: string; value: HranaValue }[];
  want_rows?: boolean;
}

export interface StmtResult {
  cols: { name: string | null; decltype: string | null }[];
  rows: HranaValue[][];
  affected_row_count: number;
  last_insert_rowid: string | null;
  rows_read: number;
  rows_written: number;
  query_duration_ms: number;
}

const INTEGER = /^-?\d{1,20}$/;

/** A Hrana value as a scopebase parameter; a malformed one is the caller's error. */
export function toParam(v: unknown, where: string): unknown {
  const o = v as Record<string, unknown> | null;
  switch (o?.type) {
    case 'null': return null;
    case 'text':
      if (typeof o.value !== 'string') break;
      return o.value;
    case 'float':
      if (typeof o.value !== 'number' || !Number.isFinite(o.value)) break;
      return o.value;
    case 'integer': {
      if (typeof o.value !== 'string' || !INTEGER.test(o.value)) break;
      const n = BigInt(o.value);
      if (n < -(2n ** 63n) || n >= 2n ** 63n) break;
      return Number.isSafeInteger(Number(o.value)) ? Number(o.value) : { $bigint: n.toString() };
    }
    case 'blob':
      if (typeof o.base64 !== 'string') break;
      return { $blob: o.base64 };
  }
  throw new ApiError('invalid_request', `${where} is not a Hrana value ({"type": "null" | "integer" | "float" | "text" | "blob", ...})`);
}

/** A scopebase result value as a Hrana value. */
export function fromValue(v: unknown): HranaValue {
  if (v === null || v === undefined) return { type: 'null' };
  if (typeof v === 'string') return { type: 'text', value: v };
  if (typeof v === 'number') return Number.isInteger(v) ? { type: 'integer', value: String(v) } : { type: 'float', value: v };
  const o = v as Record<string, string>;
  if (typeof o.$bigint === 'string') return { type: 'integer', value: o.$bigint };
  if (typeof o.$real === 'number') return { type: 'float', value: o.$real }; // a whole REAL (RowShape 'typed')
  if (typeof o.$blob === 'string') return { type: 'blob', base64: o.$blob };
  return { type: 'text', value: JSON.stringify(v) };
}

/** Positional and named arguments as scopebase `params` (named ones keyed by the bare name). */
export function toParams(stmt: HranaStmt, where: string): unknown[] | Record<string, unknown> | undefined {
  const args = stmt.args ?? [];
  const named = stmt.named_args ?? [];
  if (!Array.isArray(args) || !Array.isArray(named)) throw new ApiError('invalid_request', `${where}: "args" and "named_args" must be arrays`);
  if (args.length > 0 && named.length > 0) throw new ApiError('invalid_request', `${where}: positional and named arguments together are not supported; send one kind`);
  if (named.length > 0) {
    const out: Record<string, unknown> = {};
    for (const [i, a] of named.entries()) {
      if (typeof a?.name !== 'string' || a.name === '') throw new ApiError('invalid_request', `${where}.named_args[${i}].name must be a string`);
      out[a.name.replace(/^[:@$]/, '')] = toParam(a.value, `${where}.named_args[${i}].value`);
    }
    return out;
  }
  return args.length > 0 ? args.map((a, i) => toParam(a, `${where}.args[${i}]`)) : undefined;
}

interface ScopebaseResult {
  columns?: string[];
  /** Declared types, present for the rows of RowShape 'typed'. */
  decltypes?: (string | null)[];
  rows?: unknown[][];
  rowsAffected?: number;
  lastInsertRowid?: unknown;
}

/** One statement's scopebase result as a Hrana StmtResult. */
export function toStmtResult(r: ScopebaseResult, wantRows: boolean, ms: number): StmtResult {
  const rows = wantRows ? (r.rows ?? []).map((row) => row.map(fromValue)) : [];
  const last = r.lastInsertRowid;
  return {
    cols: (r.columns ?? []).map((name, i) => ({ name, decltype: r.decltypes?.[i] ?? null })),
    rows,
    affected_row_count: r.rowsAffected ?? 0,
    last_insert_rowid: last === null || last === undefined ? null : typeof last === 'number' ? String(last) : (last as { $bigint: string }).$bigint,
    rows_read: 0,
    rows_written: r.rowsAffected ?? 0,
    query_duration_ms: ms,
  };
}
