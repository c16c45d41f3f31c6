// SPEC 4.2: lossless JSON <-> SQLite values. Integral numbers bind as INTEGER (node:sqlite would bind them as REAL).
import { ApiError } from '../shared/errors.ts';
import { isBareName } from './params.ts';

export type SqlValue = null | number | bigint | string | Uint8Array;
export type Params = SqlValue[] | Record<string, SqlValue>;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Converts one JSON parameter to a bindable value; `where` names it in the error message. `reals`: the libSQL
 * protocol's floats arrive as {"$real": n} and bind as REAL even when integral (its clients send every JS number as
 * a float); a client of the JSON API cannot send one (the service sets the protocol's marker, never a client).
 */
export function decodeValue(v: unknown, where: string, reals = false): SqlValue {
  switch (typeof v) {
    case 'string': return v;
    case 'number':
      if (Number.isSafeInteger(v)) return BigInt(v);
      if (!Number.isFinite(v)) throw notFinite(where);
      // JSON.parse has already rounded such an integer (9007199254740993 arrives as …992): refuse it, never store it wrong.
      if (Number.isInteger(v) && Math.abs(v) <= 2 ** 63) throw new ApiError('invalid_request', `${where}: the integer ${v} is past ±(2^53−1), where a JSON number loses digits; send {"$bigint": "<decimal>"}`);
      return v;
    case 'boolean': return v ? 1n : 0n;
    case 'object': {
      if (v === null) return null;
      const o = v as Record<string, unknown>;
      const keys = Object.keys(o);
      if (keys.length === 1 && typeof o.$bigint === 'string') {
        if (!/^-?\d{1,20}$/.test(o.$bigint)) throw new ApiError('invalid_request', `${where}: $bigint must be a decimal integer string`);
        const n = BigInt(o.$bigint);
        if (n < INT64_MIN || n > INT64_MAX) throw new ApiError('invalid_request', `${where}: $bigint is outside the 64-bit integer range`);
        return n;
      }
      if (reals && keys.length === 1 && typeof o.$real === 'number') return o.$real; // a JS number binds as REAL (Hrana checked it is finite)
      if (keys.length === 1 && typeof o.$blob === 'string') {
        if (o.$blob.length % 4 !== 0 || !BASE64.test(o.$blob)) throw new ApiError('invalid_request', `${where}: $blob must be standard base64`);
        return Buffer.from(o.$blob, 'base64');
      }
      throw new ApiError('invalid_request', `${where}: a value is null, a number, a string, a boolean, {"$bigint": "..."} or {"$blob": "..."}`);
    }
    default:
      throw new ApiError('invalid_request', `${where}: unsupported value`);
  }
}

/** 1e400 parses as Infinity: stored, it would read back as null (JSON has no Infinity), so it is refused. */
export function notFinite(where: string): ApiError {
  return new ApiError('invalid_request', `${where}: the number is past the range of a 64-bit float (±1.8e308), so it would be stored as Infinity, which no JSON reply can carry back`);
}

export function decodeParams(raw: unknown, where: string, reals = false): Params | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (Array.isArray(raw)) return raw.map((v, i) => decodeValue(v, `${where}.params[${i}]`, reals));
  if (typeof raw === 'object') {
    const out: Record<string, SqlValue> = Object.create(null); // `__proto__` is a parameter's name, not a prototype
    for (const [k, v] of Object.entries(raw)) {
      if (!isBareName(k)) throw new ApiError('invalid_request', `${where}.params: named parameters are keyed by their bare name (without ":", "@", "$" or "#"), got ${JSON.stringify(k.slice(0, 40))}`, { parameter: k.slice(0, 128) });
      out[k] = decodeValue(v, `${where}.params.${k}`, reals);
    }
    return out;
  }
  throw new ApiError('invalid_request', `${where}.params must be an array (positional) or an object (named)`);
}

/**
 * A REAL -0.0 as JSON text. JSON.stringify writes -0 as `0`, which reads back as another value (an INTEGER, once
 * bound again); JSON.rawJSON's text is written as it is: `-0.0`, which every JSON reader takes as a float -0.
 */
export const NEG_ZERO: unknown = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON('-0.0');
export const isNegZero = (v: unknown): boolean => v === 0 && 1 / (v as number) < 0;

/**
 * JSON.parse whose result, stringified again, keeps each -0.0 (the service passing on an executor's results). The -0s
 * are replaced by a walk after the parse, not a reviver: one called for every value took 9 times as long (a result of
 * 15 MB with `'-0.0'` in a text held every org's requests a second).
 */
export function parseKeepingNegZero(text: string): unknown {
  const root: unknown = JSON.parse(text);
  if (!text.includes('-0.0') || typeof root !== 'object' || root === null) return isNegZero(root) ? NEG_ZERO : root;
  type Node = Record<string | number, unknown>;
  const stack = [root as Node];
  const visit = (o: Node, k: string | number) => {
    const v = o[k];
    if (typeof v === 'object' && v !== null) stack.push(v as Node);
    else if (isNegZero(v)) o[k] = NEG_ZERO;
  };
  while (stack.length > 0) {
    const o = stack.pop()!;
    if (Array.isArray(o)) for (let i = 0; i < o.length; i++) visit(o, i); // rows: an index loop, for…in is twice as slow
    else for (const k in o) visit(o, k);
  }
  return root;
}

/** Encodes one result value for JSON; returns the value itself when no encoding is needed. */
export function encodeValue(v: unknown): unknown {
  if (isNegZero(v)) return NEG_ZERO;
  if (typeof v === 'bigint') return v >= -9007199254740991n && v <= 9007199254740991n ? Number(v) : { $bigint: v.toString() };
  if (v instanceof Uint8Array) return { $blob: Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64') };
  return v;
}

/** Encodes a row (array of values) in place and returns it. */
export function encodeRow(row: unknown[]): unknown[] {
  for (let i = 0; i < row.length; i++) {
    const v = row[i];
    if ((v !== null && typeof v === 'object') || typeof v === 'bigint' || v === 0) row[i] = encodeValue(v);
  }
  return row;
}
