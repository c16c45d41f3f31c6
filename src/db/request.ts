// Shape checks for /_db request bodies (SPEC 4.2–4.9). Values inside params are checked by the executor.
import { ApiError } from '../shared/errors.ts';
import { parseJsonObject } from '../shared/http.ts';
import { checkDatabase } from '../shared/names.ts';
import { hasSecondStatement } from './statement-end.ts';

import type { Op } from '../shared/db-ops.ts';

export { OPS, type Op } from '../shared/db-ops.ts';

const FIELDS: Record<Op, ReadonlySet<string>> = {
  query: new Set(['database', 'sql', 'params', 'statements', 'rows']),
  execute: new Set(['database', 'sql', 'params', 'statements', 'rows']),
  migrate: new Set(['database', 'migrations', 'dryRun', 'baseline']),
  status: new Set(['database']),
  changes: new Set(['database', 'since', 'limit']),
  snapshot: new Set(['database']),
  restore: new Set(['database', 'toVersion', 'toTime', 'dryRun']),
  export: new Set(['database', 'format']),
};

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:[Zz]|[+-](\d{2}):(\d{2}))$/; // RFC 3339 5.6: t and z may be lowercase
const MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/**
 * Whether `s` is an ISO 8601 time with a zone naming a real instant: a calendar date (Date.parse rolls 2026-02-30
 * over to March 2), hours to 23 (no 24:00), minutes and seconds to 59 (no leap second :60: none is due).
 */
export function isIsoTime(s: string): boolean {
  const m = ISO_TIME.exec(s);
  if (!m) return false;
  const [year, month, day, hour, minute, second = 0, offH = 0, offM = 0] = m.slice(1).map((x) => (x === undefined ? undefined : Number(x))) as number[];
  const leap = year! % 4 === 0 && (year! % 100 !== 0 || year! % 400 === 0);
  const days = month === 2 && leap ? 29 : MONTH_DAYS[month! - 1];
  return days !== undefined && day! >= 1 && day! <= days && hour! <= 23 && minute! <= 59 && second <= 59 && offH <= 23 && offM <= 59 && !Number.isNaN(Date.parse(s));
}

const MIGRATION_ID = /^[A-Za-z0-9._-]{1,128}$/;
const MAX_MIGRATIONS = 10_000;
export const MAX_CHANGES_PAGE = 1000;

/** Parses the body; an empty body is `{}` for operations whose fields are all optional. */
export function parseBody(op: Op, body: Buffer): Record<string, unknown> {
  if (body.length === 0 && (op === 'status' || op === 'snapshot' || op === 'export')) return {};
  return parseJsonObject(body);
}

/** The database name, checked before authentication (SPEC 2). */
export function databaseOf(req: Record<string, unknown>): string {
  return checkDatabase(req.database);
}

// Each error names the statement's 0-based index in details.statement (SPEC 4.4), a lone sql/params being 0.
function checkStatement(s: unknown, index: number, maxValueBytes: number): void {
  const where = `statements[${index}]`;
  if (typeof s !== 'object' || s === null || Array.isArray(s)) throw new ApiError('invalid_request', `${where} must be an object {"sql", "params"?}`, { statement: index });
  const o = s as Record<string, unknown>;
  for (const k of Object.keys(o)) if (k !== 'sql' && k !== 'params') throw new ApiError('invalid_request', `${where} has an unknown field ${JSON.stringify(k.slice(0, 40))}`, { statement: index });
  checkSqlAndParams(o, where, index, maxValueBytes);
}

function checkSqlAndParams(o: Record<string, unknown>, where: string, index: number, maxValueBytes: number): void {
  const statement = { statement: index };
  if (typeof o.sql !== 'string' || o.sql.trim() === '') throw new ApiError('invalid_request', `${where}.sql must be a non-empty string`, statement);
  if (hasSecondStatement(o.sql)) throw new ApiError('sql_error', `${where}.sql holds more than one statement: send one per entry of "statements" (they run as one transaction)`, statement);
  if (o.params !== undefined && o.params !== null && typeof o.params !== 'object') throw new ApiError('invalid_request', `${where}.params must be an array or an object`, statement);
  // Named only for an error: a name made for each of 10 million params was most of the check's time.
  const at = (k: string | number) => `${where}.params${Array.isArray(o.params) ? `[${k}]` : `.${k}`}`;
  if (Array.isArray(o.params)) for (let k = 0; k < o.params.length; k++) checkValueSize(o.params[k], at, k, index, maxValueBytes);
  else if (o.params) for (const k in o.params) checkValueSize((o.params as Record<string, unknown>)[k], at, k, index, maxValueBytes);
}

/** The bytes a base64 text decodes to: its `=` padding is no byte (a blob of exactly the limit was counted 2 over). */
function blobBytes(base64: string): number {
  const pad = base64.endsWith('==') ? 2 : base64.endsWith('=') ? 1 : 0;
  return Math.floor((base64.length * 3) / 4) - pad;
}

/** A value over DB_MAX_VALUE_BYTES is refused here, at once, rather than by SQLite after it crossed to an executor. */
function checkValueSize(v: unknown, at: (k: string | number) => string, k: string | number, index: number, max: number): void {
  const bytes = typeof v === 'string' ? (v.length * 3 > max ? Buffer.byteLength(v) : 0)
    : typeof (v as { $blob?: unknown } | null)?.$blob === 'string' ? blobBytes((v as { $blob: string }).$blob) : 0;
  if (bytes > max) throw new ApiError('quota_exceeded', `${at(k)} is ${bytes} bytes, over the length limit of ${max} (DB_MAX_VALUE_BYTES)`, { statement: index, sqliteCode: 'SQLITE_TOOBIG' }); // SQLite's code for a value too long, as one computed in SQL gets
}

/** Checks the rest of the request once the caller is authenticated. */
export function validate(op: Op, req: Record<string, unknown>, maxStatements: number, maxValueBytes = Infinity): void {
  for (const k of Object.keys(req)) {
    if (!FIELDS[op].has(k)) throw new ApiError('invalid_request', `unknown field ${JSON.stringify(k.slice(0, 40))} for /_db/${op}`);
  }
  if (op === 'query' || op === 'execute') {
    if (req.rows !== undefined && req.rows !== 'arrays' && req.rows !== 'objects') throw new ApiError('invalid_request', '"rows" must be "arrays" or "objects"');
    if (req.statements !== undefined) {
      if (req.sql !== undefined || req.params !== undefined) throw new ApiError('invalid_request', 'send either "sql"/"params" or "statements", not both');
      if (!Array.isArray(req.statements) || req.statements.length === 0) throw new ApiError('invalid_request', '"statements" must be a non-empty array');
      if (req.statements.length > maxStatements) throw new ApiError('payload_too_large', `a batch holds at most ${maxStatements} statements (DB_MAX_STATEMENTS), got ${req.statements.length}`);
      req.statements.forEach((s, i) => checkStatement(s, i, maxValueBytes));
    } else {
      checkSqlAndParams(req, 'request', 0, maxValueBytes);
    }
  } else if (op === 'migrate') {
    const list = req.migrations;
    if (!Array.isArray(list)) throw new ApiError('invalid_request', '"migrations" must be an array of {"id", "sql"}');
    if (list.length > MAX_MIGRATIONS) throw new ApiError('payload_too_large', `at most ${MAX_MIGRATIONS} migrations per request`);
    const seen = new Set<string>();
    list.forEach((m, i) => {
      const o = m as Record<string, unknown>;
      if (typeof o !== 'object' || o === null || typeof o.id !== 'string' || typeof o.sql !== 'string' || Object.keys(o).some((k) => k !== 'id' && k !== 'sql')) {
        throw new ApiError('invalid_request', `migrations[${i}] must be {"id": string, "sql": string}`);
      }
      if (!MIGRATION_ID.test(o.id)) throw new ApiError('invalid_request', `migrations[${i}].id must match ${MIGRATION_ID.source}`);
      if (seen.has(o.id)) throw new ApiError('invalid_request', `migration id ${o.id} appears twice`);
      seen.add(o.id);
    });
    if (req.baseline !== undefined && (typeof req.baseline !== 'string' || !seen.has(req.baseline))) {
      throw new ApiError('invalid_request', `"baseline" must be the id of one of the request's migrations: the last one the database's content already holds${typeof req.baseline === 'string' ? ` (${JSON.stringify(req.baseline.slice(0, 128))} is not among them)` : ''}`);
    }
    if (req.dryRun !== undefined && typeof req.dryRun !== 'boolean') throw new ApiError('invalid_request', '"dryRun" must be true or false');
  } else if (op === 'export') {
    if (req.format !== undefined && req.format !== 'sqlite' && req.format !== 'sql') throw new ApiError('invalid_request', '"format" must be "sqlite" (a SQLite file) or "sql" (a SQL dump)');
  } else if (op === 'restore') {
    if ((req.toVersion === undefined) === (req.toTime === undefined)) throw new ApiError('invalid_request', 'send one of "toVersion" (a version number) or "toTime" (an ISO 8601 time such as 2026-11-22T10:00:00Z)');
    if (req.toVersion !== undefined && (typeof req.toVersion !== 'number' || !Number.isSafeInteger(req.toVersion) || req.toVersion < 0)) throw new ApiError('invalid_request', '"toVersion" must be a whole number ≥ 0');
    if (req.toTime !== undefined && (typeof req.toTime !== 'string' || !isIsoTime(req.toTime))) {
      throw new ApiError('invalid_request', '"toTime" must be an ISO 8601 time with a zone naming a real date and time, such as 2026-11-22T10:00:00Z');
    }
    if (req.dryRun !== undefined && typeof req.dryRun !== 'boolean') throw new ApiError('invalid_request', '"dryRun" must be true or false');
  } else if (op === 'changes') {
    if (typeof req.since !== 'number' || !Number.isSafeInteger(req.since) || req.since < 0) throw new ApiError('invalid_request', '"since" must be a whole number ≥ 0');
    if (req.limit !== undefined && (typeof req.limit !== 'number' || !Number.isSafeInteger(req.limit) || req.limit < 1 || req.limit > MAX_CHANGES_PAGE)) {
      throw new ApiError('invalid_request', `"limit" must be a whole number from 1 to ${MAX_CHANGES_PAGE}`);
    }
  }
}
