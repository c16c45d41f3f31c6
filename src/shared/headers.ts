// SPEC 8 header hygiene: headers the services trust can only come from the proxy, never from a client — in any
// spelling a server may fold into them: case, and `_` for `-` (CGI, WSGI, PHP and many frameworks read
// `x_auth_user_id` as `x-auth-user-id`; oauth2-proxy's CVE-2025-64484 was this).
import type { IncomingHttpHeaders } from 'node:http';

/** Internal headers the proxy sets for standalone services; a client's copy is always dropped. */
export const INTERNAL_PREFIX = 'x-scopebase-';

const folded = (name: string) => (name.includes('_') ? name.toLowerCase().replaceAll('_', '-') : name.toLowerCase());

/**
 * Identity headers other auth proxies set and apps are often told to trust (oauth2-proxy's `X-Auth-Request-*`,
 * Apache's and nginx's `Remote-User`, Grafana's `X-WEBAUTH-*`; the cloud front doors an app may have moved from:
 * Google IAP `X-Goog-Authenticated-User-*`/`X-Goog-IAP-JWT-Assertion`, AWS ALB `X-Amzn-OIDC-*`, Azure
 * `X-MS-Client-Principal*`, Cloudflare Access `Cf-Access-*`, Kong `X-Consumer-*`/`X-Authenticated-*`):
 * an app behind scopebase must never get a client's.
 */
const FOREIGN_IDENTITY = /^(x-auth-user|x-auth-request-.*|(x-)?remote-user|x-webauth-.*|x-user|x-email|x-org|x-repo|x-goog-authenticated-user-.*|x-goog-iap-jwt-assertion|x-amzn-oidc-.*|x-ms-client-principal.*|cf-access-.*|x-consumer-.*|x-authenticated-.*)$/;

/** Identity and internal headers: only the proxy sets them, whoever the client is. */
export function isProxyOnly(name: string): boolean {
  const n = folded(name);
  return n.startsWith(INTERNAL_PREFIX) || n.startsWith('x-auth-user-') || FOREIGN_IDENTITY.test(n);
}

/**
 * Client-address headers CDNs and load balancers set (Cloudflare, Akamai, Fastly, F5, Envoy, Rackspace, …), which
 * an app may trust for rate limits or audit logs: a client's own would let it pose as any address. Dropped even from
 * a trusted peer: the address it vouches for reaches apps in x-forwarded-for.
 */
const CLIENT_ADDRESS = /^(x-real-ip|client-ip|x-client-ip|true-client-ip|cf-connecting-ip(v6)?|fastly-client-ip|x-cluster-client-ip|x-original-forwarded-for|x-originating-ip|x-remote-ip|x-remote-addr|x-envoy-external-address)$/;

/** Forwarding headers: dropped from every client; the proxy sets x-forwarded-* itself, a trusted peer's copies extended (forwardedHeaders). */
export function isForwarding(name: string): boolean {
  const n = folded(name);
  return n.startsWith('x-forwarded-') || n === 'forwarded' || CLIENT_ADDRESS.test(n);
}

/** Drops a client's proxy-only headers in any spelling, and forwarding headers spelled with `_` (never a real proxy's). */
export function stripSpoofableHeaders(headers: IncomingHttpHeaders): void {
  for (const name of Object.keys(headers)) {
    if (isProxyOnly(name) || (name.includes('_') && isForwarding(name))) delete headers[name];
  }
}
