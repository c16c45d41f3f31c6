// Maps what openid-client or the network threw into SPEC 3 errors; messages never carry tokens or codes.
import * as oidc from 'openid-client';
import { ApiError } from '../../shared/errors.ts';

function chain(err: unknown): unknown[] {
  const out: unknown[] = [];
  for (let e = err; e !== undefined && e !== null && out.length < 6; e = (e as { cause?: unknown }).cause) out.push(e);
  return out;
}

function isNetworkFailure(err: unknown): boolean {
  return chain(err).some((e) => {
    const x = e as { name?: string; code?: string; message?: string };
    return x.name === 'TimeoutError' || x.name === 'AbortError' || x.message === 'fetch failed'
      || (typeof x.code === 'string' && /^(ECONN|ENOTFOUND|EAI_|ETIMEDOUT|EHOSTUNREACH|UND_ERR)/.test(x.code))
      || (e instanceof Response && e.status >= 500);
  });
}

/** `what` says which step failed ("discovery", "code exchange", "user lookup"), for the page and the log. */
export function providerError(err: unknown, provider: string, what: string): ApiError {
  if (err instanceof ApiError) return err;
  if (isNetworkFailure(err)) {
    return new ApiError('unavailable', `the sign-in provider did not answer in time (${what}); try again in a moment`, { provider, step: what }, { 'retry-after': '5' });
  }
  if (err instanceof oidc.ResponseBodyError || err instanceof oidc.AuthorizationResponseError) {
    // The provider's own OAuth error code (invalid_grant, access_denied, ...) is safe to show.
    return new ApiError('invalid_request', `the sign-in provider refused the ${what}: ${String(err.error).slice(0, 60)}`, { provider, step: what, providerError: String(err.error).slice(0, 60) });
  }
  const reason = (err as Error)?.message?.slice(0, 160) ?? 'unknown';
  return new ApiError('unauthenticated', `the sign-in provider's answer did not validate (${what})`, { provider, step: what, reason });
}
