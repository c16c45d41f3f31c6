// The session for the /verify workload.
import type { Instance } from './instance.ts';

/**
 * TODO(accounts): sign in through the built-in development identity provider
 * (GET /{repo}/_account/login -> provider -> /callback, following redirects and carrying cookies)
 * and return the `session=<token>` cookie header value. Until the account service lands this
 * returns null and the /verify workload reports "unavailable".
 */
export async function obtainSessionCookie(_inst: Instance): Promise<string | null> {
  return null;
}
