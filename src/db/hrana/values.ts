// Hrana's values (HRANA_3_SPEC "Values") as scopebase parameters (SPEC 4.2): integers travel as decimal strings
// there, as numbers or {"$bigint"} here; blobs as {"base64"} there, {"$blob"} here. Results are rendered by the
// executor in Hrana's own shape (executor/hrana-result.ts) and pass through here as text where they can.
import { ApiError } from '../../shared/errors.ts';
import { isNegZero, NEG_ZERO, notFinite, parseKeepingNegZero } from '../values.ts';
import { arrayItems, slices, withoutRows } from './result-text.ts';

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

/**
 * A Hrana value as a scopebase parameter; a malformed one is the caller's error, named `name(k)`: made only for an
 * error, as /_db/query's are (a name for each of 2 million arguments was most of their check's time).
 */
export function toParam(v: unknown, name: (k: number) => string, k: number): unknown {
  const o = v as Record<string, unknown> | null;
  switch (o?.type) {
    case 'null': return null;
    case 'text':
      if (typeof o.value !== 'string') break;
      return o.value;
    case 'float':
      if (typeof o.value !== 'number') break;
      if (!Number.isFinite(o.value)) throw notFinite(name(k));
      // REAL even when integral, as libsql-server binds it; a -0 keeps its sign on the way to the executor (as JSON)
      return { $real: isNegZero(o.value) ? NEG_ZERO : o.value };
    case 'integer': {
      if (typeof o.value !== 'string' || !INTEGER.test(o.value)) break;
      const n = BigInt(o.value);
      if (n < -(2n ** 63n) || n >= 2n ** 63n) break;
      return Number.isSafeInteger(Number(o.value)) ? Number(o.value) : { $bigint: n.toString() };
    }
    case 'blob': {
      if (typeof o.base64 !== 'string') break;
      // Padding is optional in Hrana: libsql-server and the clients built on its code send none.
      const bare = o.base64.replace(/={1,2}$/, '');
      if (!/^[A-Za-z0-9+/]*$/.test(bare) || bare.length % 4 === 1) throw new ApiError('invalid_request', `${name(k)}: "base64" is not base64 (A–Z, a–z, 0–9, +, /, with or without = padding)`);
      return { $blob: bare + '='.repeat((4 - (bare.length % 4)) % 4) };
    }
  }
  throw new ApiError('invalid_request', `${name(k)} is not a Hrana value ({"type": "null" | "integer" | "float" | "text" | "blob", ...})`);
}

/** Positional and named arguments as scopebase `params` (named ones keyed by the bare name). */
export function toParams(stmt: HranaStmt, where: string): unknown[] | Record<string, unknown> | undefined {
  const args = stmt.args ?? [];
  const named = stmt.named_args ?? [];
  if (!Array.isArray(args) || !Array.isArray(named)) throw new ApiError('invalid_request', `${where}: "args" and "named_args" must be arrays`);
  if (args.length > 0 && named.length > 0) throw new ApiError('invalid_request', `${where}: positional and named arguments together are not supported; send one kind`);
  if (named.length > 0) {
    const out: Record<string, unknown> = Object.create(null); // `__proto__` is a parameter's name, not a prototype
    for (const [i, a] of named.entries()) {
      if (typeof a?.name !== 'string' || a.name === '') throw new ApiError('invalid_request', `${where}.named_args[${i}].name must be a string`);
      const bare = a.name.replace(/^[:@$#]/, ''); // `$a::b` binds params["a::b"]
      const value = toParam(a.value, (k) => `${where}.named_args[${k}].value`, i);
      // Keyed by the bare name (SPEC 4.2): two of one name are one parameter, so they must agree, or which binds is a guess.
      if (Object.hasOwn(out, bare) && JSON.stringify(out[bare]) !== JSON.stringify(value)) throw new ApiError('invalid_request', `${where}.named_args names ${JSON.stringify(bare.slice(0, 40))} twice with different values`);
      out[bare] = value;
    }
    return out;
  }
  const name = (k: number): string => `${where}.args[${k}]`;
  return args.length > 0 ? args.map((a, i) => toParam(a, name, i)) : undefined;
}

/** A StmtResult as the executor rendered it (hrana-result.ts), passed on as text. */
export class RawResult {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

const RESULTS = '{"results":[';

/** The one result of an executor reply `{"results":[R],"version":N}` as text, or null when the reply is not that shape. */
export function onlyResult(reply: string): RawResult | null {
  const end = reply.lastIndexOf('],"version":');
  return reply.startsWith(RESULTS) && end > RESULTS.length ? new RawResult(reply.slice(RESULTS.length, end)) : null;
}

/**
 * The results of an executor reply `{"results":[R…],"version":N}`, each as its text, cut apart without parsing its
 * rows (a step with `want_rows: false` without them); a reply of another shape is parsed.
 */
export function resultsOf(reply: string, steps: { want_rows?: boolean }[]): (StmtResult | RawResult)[] {
  const items = reply.startsWith(RESULTS) ? arrayItems(reply, RESULTS.length - 1) : null;
  if (!items) {
    const results = (parseKeepingNegZero(reply) as { results: StmtResult[] }).results;
    return results.map((r, i) => (steps[i]?.want_rows === false ? { ...r, rows: [] } : r));
  }
  return slices(reply, items.bounds).map((text, i) => {
    const kept = steps[i]?.want_rows === false ? withoutRows(text) : text;
    return kept === null ? { ...(parseKeepingNegZero(text) as StmtResult), rows: [] } : new RawResult(kept);
  });
}
