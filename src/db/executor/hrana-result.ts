// The libSQL protocol's statement results (HRANA_3_SPEC "Statement results"), rendered by the executor as text so the
// service can pass a one-statement result on without parsing it (SPEC 4.10's point reads at /_db/query's speed).
import type { StatementSync } from 'node:sqlite';
import { isNegZero } from '../values.ts';

/** One value read with BigInts on: an integer is a BigInt, so every number is a REAL (a whole one, and -0.0, too). */
function hranaValue(v: unknown): string {
  if (v === null || v === undefined) return '{"type":"null"}';
  if (typeof v === 'bigint') return `{"type":"integer","value":"${v}"}`;
  if (typeof v === 'number') return Number.isFinite(v) ? `{"type":"float","value":${isNegZero(v) ? '-0.0' : v}}` : '{"type":"null"}'; // JSON has no Infinity
  if (typeof v === 'string') return `{"type":"text","value":${JSON.stringify(v)}}`;
  const bytes = v as Uint8Array;
  return `{"type":"blob","base64":"${Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64')}"}`;
}

export function hranaRow(values: unknown[]): string {
  let text = '[';
  for (let i = 0; i < values.length; i++) text += (i ? ',' : '') + hranaValue(values[i]);
  return `${text}]`;
}

/** `"cols":[{"name","decltype"}]`: each column's declared type, null for an expression. */
export function hranaCols(stmt: StatementSync): string {
  return `"cols":${JSON.stringify(stmt.columns().map((c) => ({ name: c.name, decltype: c.type ?? null })))}`;
}

/**
 * A whole StmtResult: `rowid` as SQLite gave it (a BigInt or a number), null when nothing was inserted; `since` the
 * statement's start (performance.now()), for query_duration_ms.
 */
export function hranaResult(cols: string, rows: string, affected: number, rowid: unknown, since: number): string {
  const last = rowid === null || rowid === undefined ? 'null' : `"${rowid}"`;
  const ms = Math.round((performance.now() - since) * 1000) / 1000;
  return `{${cols},"rows":${rows},"affected_row_count":${affected},"last_insert_rowid":${last},"rows_read":0,"rows_written":${affected},"query_duration_ms":${ms}}`;
}

/** A transaction's reply (`{"results":[…]}`) of a StmtResult without rows is shorter: three 20-digit numbers, a duration. */
export const NO_ROWS_REPLY_MAX_BYTES = 512;

export const hranaEmpty = (since: number) => hranaResult('"cols":[]', '[]', 0, null, since);
