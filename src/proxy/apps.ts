// SPEC 8 apps: other /{repo}/* paths stream to the repo's upstream; requireSession sends anonymous visitors to sign in;
// a write or WebSocket upgrade from a page of another origin goes to the app as anonymous (or not at all).
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { AppRoute } from '../shared/config.ts';
import { ApiError } from '../shared/errors.ts';
import type { Logger } from '../shared/log.ts';
import { checkRepo, safeDecode } from '../shared/names.ts';
import type { SessionResolver } from '../account/contract.ts';
import { LOGIN_COOKIE, SESSION_COOKIE, withoutCookies } from '../account/cookies.ts';
import { identityHeaders } from '../account/identity-headers.ts';
import { createAgent, endToEndHeaders, forwardedHeaders, forwardHttp, streamBodies, urlUnder } from './forward.ts';
import { trustedPeers } from '../shared/trusted-peers.ts';
import { attachWebSocketProxy } from './apps-ws.ts';
import { isLandingRequest, sendLanding } from './landing.ts';
import { Counter } from 'prom-client';
import { metrics } from '../shared/metrics.ts';
import { wantsHtml } from '../shared/html-page.ts';
import { isSafeMethod, originMismatch, schemeHint } from '../shared/same-origin.ts';

export interface AppsOptions {
  apps: Map<string, AppRoute>;
  trustedProxies: string[];
  baseDomain: string;
  resolveSession: SessionResolver;
  /** Split mode: throws 503 when the account service is unreachable (an anonymous visitor could not sign in there). */
  signInReachable?: (req: FastifyRequest) => Promise<void>;
  /** Set-Cookie extending a session renewed while resolving this request (in-process, or relayed from /verify in split mode). */
  renewalCookie?: (req: FastifyRequest) => string | null;
  /** APPS_WS_IDLE_TIMEOUT_MS (WsOptions). */
  wsIdleTimeoutMs: number;
  logger: Logger;
}

const appRequests = new Counter({ name: 'scopebase_app_requests_total', help: 'Requests to /{repo}/* other than /_db and /_account (apps), by status class', labelNames: ['status'], registers: [metrics] });

/** Paths the product reserves under every repo; they never reach an app. */
const RESERVED = /^\/(_db|_account)(\/|$)/;
/**
 * Apps never see the session token: it is valid for every repo of the org, and the user is passed as headers instead.
 * Nor may they set it: one repo's app would otherwise sign the org's visitors into a session of its choosing.
 */
const PRIVATE_COOKIES = [SESSION_COOKIE.https, SESSION_COOKIE.http, LOGIN_COOKIE.https, LOGIN_COOKIE.http];

/** The repo of a raw first path segment: escapes decoded first (`/%77eb/` is `/web/`), as the /_db and /_account routes do. */
export function repoSegment(raw: string): string {
  return checkRepo(raw.includes('%') ? safeDecode(raw) : raw);
}

export interface AppTarget { route: AppRoute; repo: string; rawRepo: string; rest: string }

/** A path as an upstream reads it: dot segments resolved (as urlUnder sends it), escapes decoded, `//` merged (nginx). */
function asUpstreamReads(path: string): string {
  return safeDecode(new URL(`http://app.invalid${path}`).pathname).replace(/\/{2,}/g, '/');
}

/** Splits `/{repo}{rest}?query` and finds the app for (org, repo); throws SPEC 3 errors otherwise. */
export function appTarget(org: string, url: string, apps: Map<string, AppRoute>): AppTarget {
  const m = /^\/([^/?]*)([^?]*)(\?.*)?$/.exec(url);
  if (!m) throw new ApiError('not_found', 'no such route');
  const rawRepo = m[1]!;
  if (rawRepo === '') throw new ApiError('not_found', `this is the host of the organization ${org}: each repository is at /{repo}/, e.g. /web/`);
  const repo = repoSegment(rawRepo);
  const rest = m[2] || '/';
  if (RESERVED.test(rest) || RESERVED.test(asUpstreamReads(rest))) throw new ApiError('not_found', `no route for ${url.split('?')[0]!.slice(0, 200)}`);
  const route = apps.get(`${org}/${repo}`);
  if (!route) {
    // A libSQL client given `…/{repo}/_db` without its trailing `/` asks for `/{repo}/v2/pipeline` (SPEC 4.10).
    if (/^\/v[23](\/pipeline)?$/.test(rest)) throw new ApiError('not_found', `no app is configured for ${org}/${repo}; a libSQL client's URL ends in /_db/ with the trailing slash (…/${repo}/_db/), or the client drops _db from the paths it builds`);
    throw new ApiError('not_found', `no app is configured for ${org}/${repo}`);
  }
  return { route, repo, rawRepo, rest: rest + (m[3] ?? '') };
}

/** The upstream URL of an app for a request path: under the app's base path (urlUnder). */
export function upstreamUrl(route: AppRoute, rest: string): URL {
  return urlUnder(route.url, rest);
}

/**
 * Org hosts are sibling subdomains of BASE_DOMAIN, so to browsers one site: a page of another org (or any other
 * origin, with the visitor's cookie where SameSite lets it go) can send this host writes and WebSocket upgrades,
 * and the proxy would pass them to the app as the visitor. So a request whose `Origin` is not this host's own (as
 * the proxy sees it: its Host, https from the socket or a TRUSTED_PROXIES x-forwarded-proto) is not sent as anyone:
 * true, and it goes to the app without identity; a requireSession app refuses it (403 forbidden). Without an
 * Origin (not a browser, or a same-origin GET), false.
 */
export function crossOrigin(origin: string | undefined, host: string | undefined, https: boolean, what: string, route: AppRoute): boolean {
  if (origin === undefined) return false;
  const mismatch = originMismatch(origin, host, https);
  if (mismatch === null) return false;
  if (route.requireSession) {
    const hint = mismatch === 'scheme' ? ` (${schemeHint(origin, https)})` : '';
    throw new ApiError('forbidden', `this app requires a signed-in session, and ${what} from a page of another origin is not sent as the visitor: only pages of ${https ? 'https' : 'http'}://${String(host ?? '').toLowerCase()} may make it${hint}`);
  }
  return true;
}

/** An API call rather than a navigation: its Accept names application/json and not text/html. */
function asksForJson(req: FastifyRequest): boolean {
  return !wantsHtml(req) && /(^|,)\s*application\/json\s*(;|,|$)/i.test(String(req.headers.accept ?? ''));
}

export function createAppsPlugin(opts: AppsOptions): { plugin: FastifyPluginAsync; close(): Promise<void> } {
  const agent = createAgent();
  const isTrusted = trustedPeers(opts.trustedProxies);

  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    if (isLandingRequest(req)) {
      const repo = repoSegment(/^\/([^/?]+)/.exec(req.url)![1]!);
      if (!opts.apps.has(`${req.org}/${repo}`)) return sendLanding(req, reply, repo, await opts.resolveSession(req));
    }
    const target = appTarget(req.org, req.url, opts.apps);
    const foreign = !isSafeMethod(req.method) && crossOrigin(req.headers.origin, req.headers.host, req.protocol === 'https', `a ${req.method}`, target.route);
    const session = foreign ? null : await opts.resolveSession(req);
    const renewed = opts.renewalCookie?.(req);
    if (renewed) reply.header('set-cookie', renewed);
    if (!session && target.route.requireSession) {
      // An unreachable session check is no "not signed in": 503 now, not a way to a sign-in page that fails.
      await opts.signInReachable?.(req);
      if (req.method !== 'GET' && req.method !== 'HEAD') throw new ApiError('unauthenticated', 'this app requires a signed-in session');
      const returnTo = req.url.startsWith('/') ? req.url : `/${target.repo}/`;
      const login = `/${target.repo}/_account/login?${new URLSearchParams({ return_to: returnTo })}`;
      reply.header('cache-control', 'no-store');
      // A script's fetch asking for JSON cannot follow a redirect to the provider: 401 saying where, as oauth2-proxy does.
      if (asksForJson(req)) throw new ApiError('unauthenticated', 'this app requires a signed-in session: sign in at details.login', { login });
      return reply.redirect(login, 302);
    }
    const headers = {
      ...endToEndHeaders(req.headers, (c) => withoutCookies(c, PRIVATE_COOKIES)),
      ...forwardedHeaders(req.raw, isTrusted(req.socket.remoteAddress), `/${target.rawRepo}`),
      ...(session ? identityHeaders(session.user) : {}),
    };
    return forwardHttp(req, reply, upstreamUrl(target.route, target.rest), headers, agent, 'app', PRIVATE_COOKIES);
  };

  const plugin: FastifyPluginAsync = async (app) => {
    streamBodies(app);
    // Every request the apps' routes answered, forwarded or not (a sign-in redirect, a landing page, an upstream's reply).
    app.addHook('onResponse', async (_req, reply) => {
      appRequests.inc({ status: `${Math.floor(reply.statusCode / 100)}xx` });
    });
    app.all('/:repo', handler);
    app.all('/:repo/*', handler);
    const detach = attachWebSocketProxy(app.server, { ...opts, isTrusted, privateCookies: PRIVATE_COOKIES, idleTimeoutMs: opts.wsIdleTimeoutMs, onAnswer: (status) => appRequests.inc({ status: `${Math.floor(status / 100)}xx` }) });
    app.addHook('preClose', async () => detach());
  };
  return { plugin, close: () => agent.close() };
}
