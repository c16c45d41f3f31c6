// Checking what callers send: credential names, values, expiry dates, user ids. Messages never echo a value.
import { ApiError } from '../../shared/errors.ts';
import { quote } from '../../shared/names.ts';
import { jsonTooComplex, MAX_JSON_DEPTH } from '../../shared/http.ts';
import { MAX_VALUE_BYTES, type CredentialValue } from './store.ts';

/** plugin and name: lowercase ASCII, no slashes, cannot be `.` or `..`, at most 64 characters. */
export const CREDENTIAL_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const USER_ID = /^[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?$/;
/** RFC 3339 `date-time` (T and Z in either case, as its section 5.6 allows); the ranges are checked by rfc3339Time. */
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|([+-])(\d{2}):(\d{2}))$/i;
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

export function checkCredentialName(kind: 'plugin' | 'name', raw: unknown): string {
  if (typeof raw !== 'string') throw new ApiError('invalid_name', `${kind} is required`);
  if (raw.includes('/')) throw new ApiError('invalid_name', `${kind} ${quote(raw)} may not contain "/" (an encoded %2F included): the path is /credentials/{plugin}/{name}`);
  if (!CREDENTIAL_NAME.test(raw)) throw new ApiError('invalid_name', `${kind} ${quote(raw)} must match ${CREDENTIAL_NAME.source}`);
  return raw;
}

/** The user a runtime call acts for (`?user=`): printable ASCII, 1 to 256 characters. */
export function checkUserId(raw: unknown): string {
  if (raw === undefined || raw === '') throw new ApiError('invalid_request', 'the runtime must name the user with ?user={userId}');
  if (typeof raw !== 'string') throw new ApiError('invalid_request', '?user= must be given once');
  if (!USER_ID.test(raw)) throw new ApiError('invalid_request', '?user= must be 1 to 256 printable ASCII characters');
  return raw;
}

function daysIn(year: number, month: number): number {
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  return [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]!;
}

/**
 * The instant (ms since the epoch) of a strict RFC 3339 date-time: a real calendar date, hours 00-23, minutes 00-59,
 * seconds 00-59, zone Z or ±hh:mm. Second 60 is a leap second, the last second of a UTC day (23:59:60 UTC): it is
 * taken as the instant after 23:59:59.999, i.e. the next day's 00:00:00 UTC. Date.parse would roll 02-30 over to
 * March and refuse leap seconds. Throws 400 invalid_request naming the field that is out of range.
 */
export function rfc3339Time(raw: string, field: string): number {
  const m = RFC3339.exec(raw);
  const bad = (why: string) => new ApiError('invalid_request', `${field}: ${why}`);
  if (!m) throw bad('must be an RFC 3339 date-time such as 2030-01-31T12:00:00Z (seconds and a zone, Z or ±hh:mm, included)');
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  if (month < 1 || month > 12) throw bad(`month ${m[2]} does not exist (01-12)`);
  if (day < 1 || day > daysIn(year, month)) throw bad(`${MONTHS[month - 1]} ${m[1]} has no day ${m[3]} (it has ${daysIn(year, month)})`);
  if (hour > 23) throw bad(`hour ${m[4]} is out of range (00-23)`);
  if (minute > 59) throw bad(`minute ${m[5]} is out of range (00-59)`);
  if (second > 60) throw bad(`second ${m[6]} is out of range (00-59, or 60 for a leap second)`);
  const offsetMinutes = m[9] === undefined ? 0 : (m[9] === '-' ? -1 : 1) * (Number(m[10]) * 60 + Number(m[11]));
  if (m[9] !== undefined && (Number(m[10]) > 23 || Number(m[11]) > 59)) throw bad(`the zone offset ${m[8]} is out of range (-23:59 to +23:59)`);
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day); // not Date.UTC: it reads years 0-99 as 1900-1999
  d.setUTCHours(hour, minute, Math.min(second, 59), Number((m[7] ?? '').padEnd(3, '0').slice(0, 3)));
  const t = d.getTime() - offsetMinutes * 60_000;
  if (second === 60) {
    const utc = new Date(t);
    if (utc.getUTCHours() !== 23 || utc.getUTCMinutes() !== 59) throw bad('a leap second (:60) is only the last second of a UTC day, 23:59:60Z');
    return t + 1000;
  }
  return t;
}

/** The last instant RFC 3339 can write: past it toISOString gives a six-digit year (`+010000-…`), which no client reads. */
const LAST_RFC3339_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

/** expiresAt: absent/null for never, else an RFC 3339 date-time in the future; stored normalized to UTC. */
export function checkExpiresAt(raw: unknown, now = Date.now()): string | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'string') throw new ApiError('invalid_request', '"expiresAt" must be an RFC 3339 date-time such as 2030-01-31T12:00:00Z, or null');
  const t = rfc3339Time(raw, '"expiresAt"');
  if (t <= now) throw new ApiError('invalid_request', '"expiresAt" is in the past');
  if (t > LAST_RFC3339_MS) throw new ApiError('invalid_request', '"expiresAt" is past 9999-12-31T23:59:59Z (UTC), the last instant RFC 3339 can write; null (or no expiresAt) is never');
  return new Date(t).toISOString();
}

/** A value is a string or a JSON object (not an array or null), at most MAX_VALUE_BYTES once serialized. */
export function checkValue(raw: unknown): CredentialValue {
  if (raw === undefined) throw new ApiError('invalid_request', '"value" is required');
  if (typeof raw !== 'string' && (typeof raw !== 'object' || raw === null || Array.isArray(raw))) {
    throw new ApiError('invalid_request', '"value" must be a string or a JSON object');
  }
  const bytes = Buffer.byteLength(JSON.stringify(raw), 'utf8');
  if (bytes > MAX_VALUE_BYTES) {
    throw new ApiError('payload_too_large', `the value is ${bytes} bytes as JSON; the limit is ${MAX_VALUE_BYTES}`, { limit: MAX_VALUE_BYTES });
  }
  return raw as CredentialValue;
}

export function isExpired(expiresAt: string | null, now = Date.now()): boolean {
  return expiresAt !== null && Date.parse(expiresAt) <= now;
}

/** The JSON body of a PUT: {"value", "expiresAt"?}; other fields are refused so a typo is not silently ignored. */
export function parsePutBody(body: Record<string, unknown>): { value: CredentialValue; expiresAt: string | null } {
  for (const key of Object.keys(body)) {
    if (key !== 'value' && key !== 'expiresAt') throw new ApiError('invalid_request', `unknown field ${quote(key)}; a credential is {"value", "expiresAt"?}`);
  }
  const value = checkValue(body.value);
  return { value, expiresAt: checkExpiresAt(body.expiresAt) };
}

/** <input type="datetime-local"> sends no zone, and no seconds when they are 0: read as UTC, it is RFC 3339. */
function datetimeLocalAsUtc(value: string): string {
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(value)) return `${value}:00Z`;
  return /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?$/.test(value) ? `${value}Z` : value;
}

export interface FormInput {
  method: 'put' | 'delete';
  plugin: unknown;
  name: unknown;
  value: string | null;
  type: string;
  expiresAt: string | null;
}

/** An HTML form post (application/x-www-form-urlencoded): _method, plugin, name, value, type (text|json), expiresAt. */
export function parseForm(contentType: string | undefined, body: unknown): FormInput {
  if (!/^application\/x-www-form-urlencoded\s*(;|$)/i.test(contentType ?? '')) {
    throw new ApiError('invalid_request', 'form posts must be application/x-www-form-urlencoded');
  }
  if (!Buffer.isBuffer(body)) throw new ApiError('invalid_request', 'empty form');
  const form = new URLSearchParams(body.toString('utf8'));
  const method = (form.get('_method') ?? 'put').toLowerCase();
  if (method !== 'put' && method !== 'delete') throw new ApiError('invalid_request', '_method must be put or delete');
  const expires = form.get('expiresAt')?.trim() ?? '';
  return {
    method,
    plugin: form.get('plugin') ?? undefined,
    name: form.get('name') ?? undefined,
    value: form.get('value'),
    type: form.get('type') ?? 'text',
    expiresAt: expires === '' ? null : datetimeLocalAsUtc(expires),
  };
}

/** The value of a form: the text itself, or (type=json) the JSON object it holds. */
export function formValue(input: FormInput): CredentialValue {
  if (input.value === null) throw new ApiError('invalid_request', '"value" is required', { field: 'value', problem: 'missing' });
  if (input.type === 'text') return checkValue(input.value);
  if (input.type !== 'json') throw new ApiError('invalid_request', 'type must be text or json');
  // As every JSON body (parseJsonObject): deeper, checkValue's JSON.stringify overflowed the stack, a 500.
  if (jsonTooComplex(input.value) === 'deep') throw new ApiError('invalid_request', `the JSON value nests deeper than ${MAX_JSON_DEPTH} levels`, { field: 'value', problem: 'deep' });
  let parsed: unknown;
  try {
    parsed = JSON.parse(input.value);
  } catch {
    throw new ApiError('invalid_request', 'the value is not valid JSON', { field: 'value', problem: 'json' });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ApiError('invalid_request', 'a JSON value must be an object', { field: 'value', problem: 'object' });
  return checkValue(parsed);
}
