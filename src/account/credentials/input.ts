// Checking what callers send: credential names, values, expiry dates, user ids. Messages never echo a value.
import { ApiError } from '../../shared/errors.ts';
import { quote } from '../../shared/names.ts';
import { MAX_VALUE_BYTES, type CredentialValue } from './store.ts';

/** plugin and name: lowercase ASCII, no slashes, cannot be `.` or `..`, at most 64 characters. */
export const CREDENTIAL_NAME = /^[a-z0-9][a-z0-9._-]{0,63}$/;
const USER_ID = /^[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?$/;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2})$/i;

export function checkCredentialName(kind: 'plugin' | 'name', raw: unknown): string {
  if (typeof raw !== 'string') throw new ApiError('invalid_name', `${kind} is required`);
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

/** expiresAt: absent/null for never, else an RFC 3339 date-time in the future; stored normalized to UTC. */
export function checkExpiresAt(raw: unknown, now = Date.now()): string | null {
  if (raw === undefined || raw === null) return null;
  if (typeof raw !== 'string' || !RFC3339.test(raw) || Number.isNaN(Date.parse(raw))) {
    throw new ApiError('invalid_request', '"expiresAt" must be an RFC 3339 date-time such as 2030-01-31T12:00:00Z, or null');
  }
  const t = Date.parse(raw);
  if (t <= now) throw new ApiError('invalid_request', '"expiresAt" is in the past');
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
    // <input type="datetime-local"> sends no zone: read it as UTC.
    expiresAt: expires === '' ? null : /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/.test(expires) ? `${expires}Z` : expires,
  };
}

/** The value of a form: the text itself, or (type=json) the JSON object it holds. */
export function formValue(input: FormInput): CredentialValue {
  if (input.value === null) throw new ApiError('invalid_request', '"value" is required');
  if (input.type === 'text') return checkValue(input.value);
  if (input.type !== 'json') throw new ApiError('invalid_request', 'type must be text or json');
  let parsed: unknown;
  try {
    parsed = JSON.parse(input.value);
  } catch {
    throw new ApiError('invalid_request', 'the value is not valid JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new ApiError('invalid_request', 'a JSON value must be an object');
  return checkValue(parsed);
}
