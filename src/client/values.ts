// SPEC 4.2 values: integers past ±(2^53−1) travel as {"$bigint"}, blobs as {"$blob": base64}; both ways, nothing lost.

/** A value as the wire carries it. */
export type WireValue = null | number | string | { $bigint: string } | { $blob: string };
/** A value as app code sees it: bigint for integers past 2^53, Uint8Array for blobs. */
export type Value = null | number | string | bigint | Uint8Array;
/** What a parameter may be: booleans bind as 1/0. */
export type InValue = Value | boolean;
export type Params = InValue[] | Record<string, InValue>;

export function encodeValue(v: InValue): WireValue | boolean {
  if (typeof v === 'bigint') {
    return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : { $bigint: v.toString() };
  }
  if (v instanceof Uint8Array) return { $blob: toBase64(v) };
  return v;
}

export function encodeParams(params: Params | undefined): unknown {
  if (params === undefined) return undefined;
  if (Array.isArray(params)) return params.map(encodeValue);
  return Object.fromEntries(Object.entries(params).map(([k, v]) => [k, encodeValue(v)]));
}

export function decodeValue(v: unknown): Value {
  if (v !== null && typeof v === 'object') {
    if ('$bigint' in v) return BigInt((v as { $bigint: string }).$bigint);
    if ('$blob' in v) return fromBase64((v as { $blob: string }).$blob);
  }
  return v as Value;
}

function toBase64(bytes: Uint8Array): string {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(b64: string): Uint8Array {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}
