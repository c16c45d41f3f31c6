// SPEC 3's error shape, checked as an outside client reads it: one `error` with a code, a message and maybe details.
import assert from 'node:assert/strict';
import type { HttpResult } from './product.ts';

/** Asserts `r` is SPEC 3's error `code` with `status`, as JSON, with an x-request-id; returns `r.json.error`. */
export function assertSpecError(r: HttpResult, status: number, code: string, what = ''): { code: string; message: string; details?: Record<string, unknown> } {
  const label = `${what} ${r.text.slice(0, 300)}`;
  assert.equal(r.status, status, label);
  assert.match(String(r.headers['content-type']), /^application\/json/, label);
  assert.deepEqual(Object.keys(r.json ?? {}), ['error'], label);
  const e = r.json.error;
  assert.equal(e.code, code, label);
  assert.ok(typeof e.message === 'string' && e.message.length > 0, `a message: ${label}`);
  assert.ok(Object.keys(e).every((k) => k === 'code' || k === 'message' || k === 'details'), label);
  if (e.details !== undefined) assert.ok(typeof e.details === 'object' && e.details !== null && !Array.isArray(e.details), label);
  assert.ok(String(r.headers['x-request-id'] ?? '').length > 0, `x-request-id: ${label}`);
  assert.doesNotMatch(r.text, /\bat .*\.(ts|js):\d+/, 'no stack trace');
  return e;
}
