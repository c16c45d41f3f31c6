// Maps what openid-client or the network threw into SPEC 3 errors; messages never carry tokens or codes. They say
// what went wrong; the sign-in routes add what the person can do next (retry /login, or start the sign-in again).
import * as oidc from 'openid-client';
import { ApiError } from '../../shared/errors.ts';
import { AnswerTooLarge, PROVIDER_ANSWER_MAX_BYTES } from './bounded-fetch.ts';

function chain(err: unknown): unknown[] {
  const out: unknown[] = [];
  for (let e = err; e !== undefined && e !== null && out.length < 6; e = (e as { cause?: unknown }).cause) out.push(e);
  return out;
}

type Failure = { name?: string; code?: string; message?: string; hostname?: string };

/** Why the provider could not be used, in words for the person, or null when it answered (and refused or lied). */
function networkFailure(err: unknown, what: string): string | null {
  const all = chain(err);
  const errors = all as Failure[];
  if (all.some((e) => e instanceof AnswerTooLarge)) return `the sign-in provider's answer during the ${what} was over ${PROVIDER_ANSWER_MAX_BYTES / 1024 / 1024} MiB, more than any real one: it was not read`;
  // A failed DNS lookup is not slowness: the name is wrong, or this machine has no resolver or network.
  const dns = errors.find((x) => typeof x.code === 'string' && /^(ENOTFOUND|EAI_)/.test(x.code));
  if (dns) return `the sign-in provider's ${dns.hostname ? `host ${dns.hostname}` : 'host name'} could not be resolved (DNS) during the ${what}`;
  if (errors.some((x) => x.name === 'TimeoutError' || x.name === 'AbortError' || x.code === 'ETIMEDOUT' || /^UND_ERR_.*TIMEOUT$/.test(x.code ?? ''))) {
    return `the sign-in provider did not answer in time during the ${what}`;
  }
  const answered = all.find((e): e is Response => e instanceof Response && e.status >= 500);
  if (answered) return `the sign-in provider answered HTTP ${answered.status} during the ${what}`;
  if (errors.some((x) => x.message === 'fetch failed' || /^(ECONN|EHOSTUNREACH|ENETUNREACH|EPIPE|UND_ERR)/.test(x.code ?? ''))) {
    return `the sign-in provider could not be reached during the ${what}`;
  }
  return null;
}

/** `what` says which step failed ("discovery", "code exchange", "user lookup"), for the page and the log. */
export function providerError(err: unknown, provider: string, what: string): ApiError {
  if (err instanceof ApiError) return err;
  const failure = networkFailure(err, what);
  if (failure) return new ApiError('unavailable', failure, { provider, step: what }, { 'retry-after': '5' });
  if (err instanceof oidc.AuthorizationResponseError) {
    // The provider sent the browser back with an error instead of a code: nothing was exchanged.
    const code = String(err.error).slice(0, 60);
    const message = code === 'access_denied'
      ? 'the sign-in was declined at the provider (access_denied): it was cancelled there, or the provider would not sign this account in'
      : `the sign-in provider ended the sign-in with ${code}`;
    return new ApiError('invalid_request', message, { provider, step: 'authorization', providerError: code });
  }
  if (err instanceof oidc.ResponseBodyError) {
    // The provider's own OAuth error code (invalid_grant, ...) is safe to show.
    return new ApiError('invalid_request', `the sign-in provider refused the ${what}: ${String(err.error).slice(0, 60)}`, { provider, step: what, providerError: String(err.error).slice(0, 60) });
  }
  // JSON.parse's message quotes the answer ("HOSTILE-BO"... is not valid JSON): none of it goes to the log or the page.
  const reason = err instanceof SyntaxError ? 'the answer is not valid JSON' : (err as Error)?.message?.slice(0, 160) ?? 'unknown';
  return new ApiError('unauthenticated', `the sign-in provider's answer did not validate (${what})`, { provider, step: what, reason });
}
