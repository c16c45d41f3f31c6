// Whether a browser's `Origin` names the origin a request came to: the account service's same-site check on its own
// writes (SPEC 7) and the proxy's on writes and WebSocket upgrades it forwards to apps (SPEC 8) read it the same way.

/** RFC 9110 9.2.1's safe methods: they must not change state, so their Origin decides nothing (a page may send them). */
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

export const isSafeMethod = (method: string): boolean => SAFE_METHODS.has(method.toUpperCase());

/** How an `Origin` differs from the request's own origin: another host or port, another scheme, or no origin at all (`null`, garbage). */
export type OriginMismatch = 'host' | 'scheme' | 'malformed';

/**
 * Compares `origin` (an `Origin` header) with the origin the request was sent to: `host` (its Host header) over
 * https or http, as the server learnt it (x-forwarded-proto only from TRUSTED_PROXIES). Schemeful: a page on http://
 * of the same host is another origin than https:// (a network attacker's injection). A default port may be written
 * or not on either side. Null when they are the same origin.
 */
export function originMismatch(origin: string, host: string | undefined, https: boolean): OriginMismatch | null {
  let url: URL;
  try {
    url = new URL(origin);
  } catch {
    return 'malformed'; // `null` (a sandboxed frame, a redirect from elsewhere) or not a URL
  }
  if (url.host === '' || url.host !== ownHost(String(host ?? ''), https)) return 'host';
  if (url.protocol !== (https ? 'https:' : 'http:')) return 'scheme';
  return null;
}

/** The Host header as the browser's Origin writes it: lowercase, without the scheme's default port. */
function ownHost(host: string, https: boolean): string {
  const h = host.toLowerCase();
  const port = https ? ':443' : ':80';
  return h.endsWith(port) ? h.slice(0, -port.length) : h;
}

/** What to add to a refusal for a scheme mismatch: most often a TLS-terminating load balancer the server does not trust. */
export function schemeHint(origin: string, https: boolean): string {
  return `the page is ${new URL(origin).protocol}// but this server was reached over ${https ? 'https' : 'http'}://; behind a TLS-terminating proxy, list it in TRUSTED_PROXIES`;
}
