// SPEC 8 header hygiene: headers the services trust can only come from the proxy, never from a client — in any
// spelling a server may fold into them: case, and `_` or `.` (any token character but a letter, digit or `-`) for
// `-` (CGI, WSGI, PHP and many frameworks read `x_auth_user_id` as `x-auth-user-id`, oauth2-proxy's CVE-2025-64484;
// those that map header names to variable names turn `X.Auth.User.Id` into the same `HTTP_X_AUTH_USER_ID`).
import type { IncomingHttpHeaders } from 'node:http';

/** Internal headers the proxy sets for standalone services; a client's copy is always dropped. */
export const INTERNAL_PREFIX = 'x-scopebase-';

/** Token characters other than letters, digits and `-` (RFC 9110 5.6.2): what a server may fold into `-`. */
const SEPARATOR_LIKE = /[^A-Za-z0-9-]/g;
const odd = (name: string) => /[^A-Za-z0-9-]/.test(name);
const folded = (name: string) => (odd(name) ? name.toLowerCase().replace(SEPARATOR_LIKE, '-') : name.toLowerCase());

/**
 * Identity headers other auth proxies set and apps are often told to trust (oauth2-proxy's `X-Auth-Request-*`,
 * Apache's and nginx's `Remote-User`, Authelia's `Remote-*`, Kubernetes' `X-Remote-*`, Grafana's `X-WEBAUTH-*`,
 * authentik's `X-authentik-*`, Pomerium's `X-Pomerium-*`, Vouch's `X-Vouch-*`, Tailscale's `Tailscale-User-*`, the
 * generic `X-User-Id`/`X-Username`, mTLS client certificates passed on by nginx or IIS; the cloud front doors an app
 * may have moved from: Google IAP `X-Goog-Authenticated-User-*`/`X-Goog-IAP-JWT-Assertion`, AWS ALB `X-Amzn-OIDC-*`,
 * Azure `X-MS-Client-Principal*`, Cloudflare Access `Cf-Access-*`, Kong `X-Consumer-*`/`X-Authenticated-*`):
 * an app behind scopebase must never get a client's. (oauth2-proxy's `X-Forwarded-User`/`-Email`/`-Groups` are
 * forwarding headers, dropped from every client: isForwarding.)
 */
const FOREIGN_IDENTITY = new RegExp(`^(${[
  'x-auth-user', 'x-auth-request-.*', '(x-)?remote-(user|email|name|groups?|extra-.*)', 'x-webauth-.*',
  'x-user(-(id|email|name|login|groups|roles))?', 'x-username', 'x-email', 'x-org', 'x-repo',
  'x-authentik-.*', 'x-pomerium-.*', 'x-vouch-.*', 'tailscale-user-.*',
  '(x-)?ssl-client-.*', 'x-client-(cert|verify|dn)', 'x-ssl-cert', 'x-arr-clientcert',
  'x-goog-authenticated-user-.*', 'x-goog-iap-jwt-assertion', 'x-amzn-oidc-.*', 'x-ms-client-principal.*', 'cf-access-.*',
  'x-consumer-.*', 'x-authenticated-.*',
].join('|')})$`);

/**
 * Headers that make a server (IIS, Symfony, Laravel, Drupal, nginx setups) take another path than the request line's:
 * `X-Original-URL: /admin` on a request for `/` would reach what the proxy or the app's own rules never allowed.
 */
const PATH_OVERRIDE = /^(x-original-url|x-original-uri|x-rewrite-url|x-override-url)$/;

/** Identity, path-override and internal headers: only the proxy sets them, whoever the client is. */
export function isProxyOnly(name: string): boolean {
  const n = folded(name);
  return n.startsWith(INTERNAL_PREFIX) || n.startsWith('x-auth-user-') || FOREIGN_IDENTITY.test(n) || PATH_OVERRIDE.test(n);
}

/**
 * Client-address headers CDNs and load balancers set (Cloudflare, Akamai, Fastly, F5, Envoy, Rackspace, …), which
 * an app may trust for rate limits or audit logs: a client's own would let it pose as any address. Dropped even from
 * a trusted peer: the address it vouches for reaches apps in x-forwarded-for.
 */
const CLIENT_ADDRESS = /^(x-real-ip|client-ip|x-client-ip|true-client-ip|cf-connecting-ip(v6)?|fastly-client-ip|x-cluster-client-ip|x-original-forwarded-for|x-originating-ip|x-remote-ip|x-remote-addr|x-envoy-external-address|x-proxyuser-ip)$/;

/**
 * Scheme and host headers other front ends set and frameworks read (IIS and ASP.NET `Front-End-Https`, Rack
 * `X-Url-Scheme`, `HTTPS` and `X-HTTPS` of CGI setups, `X-Host` and `X-Original-Host`): a client's own would make an
 * app build https links, or links to another host, from what the client said. The proxy's x-forwarded-* say it.
 */
const SCHEME_OR_HOST = /^(front-end-https|x-url-scheme|x-https|https|x-host|x-original-host)$/;

/**
 * Facts about the client's connection a TRUSTED_PROXIES peer states besides x-forwarded-for, -proto, -host and -prefix,
 * kept from it only (forwardedHeaders, SPEC 8): the port the client reached, and the scheme as Rack, Symfony and nginx
 * setups spell it. Never an x-forwarded-* that says who the user is — `x-forwarded-user`, `-email`, `-groups`,
 * `-preferred-username`, `-access-token`, oauth2-proxy's, which apps behind it trust: dropped from everyone, peers too.
 */
export const FORWARDED_TRANSPORT = ['x-forwarded-port', 'x-forwarded-ssl', 'x-forwarded-scheme'] as const;

/** Forwarding headers: dropped from every client; the proxy sets x-forwarded-* itself, a trusted peer's copies extended (forwardedHeaders). */
export function isForwarding(name: string): boolean {
  const n = folded(name);
  return n.startsWith('x-forwarded-') || n === 'forwarded' || CLIENT_ADDRESS.test(n) || SCHEME_OR_HOST.test(n);
}

/** Drops a client's proxy-only headers in any spelling, and forwarding headers spelled with `_` or `.` (never a real proxy's). */
export function stripSpoofableHeaders(headers: IncomingHttpHeaders): void {
  for (const name of Object.keys(headers)) {
    if (isProxyOnly(name) || (odd(name) && isForwarding(name))) delete headers[name];
  }
}
