// Errors on the libSQL protocol's paths (SPEC 4.10) in a form libSQL clients can show: @libsql/client reads an HTTP
// error's body only when its type is exactly `application/json` and it has a top-level `message` (else it says just
// "Server returned HTTP status 401"). The body stays SPEC 3's, with `message` and `code` beside `error`.
import type { ErrorBody } from './errors.ts';

/** `/{repo}/_db/[{database}/]v2|v3[/pipeline|/cursor]`, and `/{repo}/v2/pipeline`: a client's URL without its trailing `/`. */
const LIBSQL_PATH = /^\/[^/?]+(?:\/_db(?:\/[^/?]+)?)?\/v[23](?:\/pipeline|\/cursor)?(?:\?|$)/;

export const LIBSQL_ERROR_TYPE = 'application/json';

/**
 * An error reply on a libSQL path as libSQL clients read it: SPEC 3's body plus `message` and `code` (upper case,
 * like SQLite's code names). Null for anything else: another path, a success, a body that is not SPEC 3's.
 */
export function libsqlErrorBody(status: number, url: string | undefined, payload: unknown): string | null {
  if (status < 400 || !LIBSQL_PATH.test(url ?? '') || (typeof payload !== 'string' && !Buffer.isBuffer(payload))) return null;
  try {
    const body = JSON.parse(payload.toString()) as ErrorBody;
    if (typeof body?.error?.message !== 'string' || typeof body.error.code !== 'string') return null;
    return JSON.stringify({ ...body, message: body.error.message, code: body.error.code.toUpperCase() });
  } catch {
    return null;
  }
}
