// `scopebase serve account`: the account plugin on its own server. Org, repo, host, scheme and client address come from
// x-scopebase-* headers only when x-scopebase-proxy-token is the proxy's; otherwise the org comes from Host as at the proxy.
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../shared/config.ts';
import type { ConnectionCap } from '../shared/connection-cap.ts';
import { chargeToClient } from '../shared/body-budget.ts';
import { createHttpApp, sendError } from '../shared/http.ts';
import { ApiError } from '../shared/errors.ts';
import { sendErrorPage, wantsHtml } from '../shared/html-page.ts';
import type { Logger } from '../shared/log.ts';
import { checkOrg, checkRepo } from '../shared/names.ts';
import { deriveKey } from '../shared/secrets.ts';
import { stripSpoofableHeaders } from '../shared/headers.ts';
import { orgFromHost } from '../shared/host.ts';
import { setForwardedInfo } from './request-info.ts';
import { ACCOUNT_BODY_LIMIT, type AccountService } from './service.ts';
import { sendVerify } from './routes/session.ts';
import { ANSWER_MARK_HEADER, answerMark } from './contract.ts';

export function proxyToken(rootKey: Buffer): string {
  return deriveKey(rootKey, 'proxy-token').toString('base64url');
}

interface Routed { org: string; repo: string; host: string; https: boolean; ip: string; token: string }

export function createAccountServer(opts: { config: Config; logger: Logger; service: AccountService; connections: ConnectionCap }): FastifyInstance {
  const expected = opts.config.rootKeys.map((k) => Buffer.from(proxyToken(k)));
  const routed = new WeakMap<IncomingMessage, Routed>();

  const fromProxy = (raw: IncomingMessage): Routed | null => {
    const given = raw.headers['x-scopebase-proxy-token'];
    if (typeof given !== 'string') return null;
    const g = Buffer.from(given);
    let ok = false;
    for (const e of expected) if (g.length === e.length && timingSafeEqual(g, e)) ok = true;
    if (!ok) return null;
    const h = (name: string) => String(raw.headers[`x-scopebase-${name}`] ?? '');
    return { org: h('org'), repo: h('repo'), host: h('host'), https: h('proto') === 'https', ip: h('client-ip'), token: given };
  };

  const app = createHttpApp({
    logger: opts.logger.child({ server: 'account' }), bodyLimit: ACCOUNT_BODY_LIMIT, connections: opts.connections,
    // Every answer to the proxy (a request with its token) is signed, those before any route (the connection cap's 503:
    // busy) too: its 5xx is then told apart from a gateway's in between (proxy/forward-account.ts).
    answerHeaders: (raw): Record<string, string> => {
      const r = fromProxy(raw);
      const id = raw.headers['x-request-id'];
      return r && typeof id === 'string' ? { [ANSWER_MARK_HEADER]: answerMark(r.token, id) } : {};
    },
    // Called straight by a forward-auth proxy (no proxy token), the browser's scheme is its x-forwarded-proto when it is
    // listed, as at the proxy: under HTTPS the cookie is __Host-session, never the plain one a sibling host can plant.
    trustProxy: opts.config.trustedProxies.length ? opts.config.trustedProxies : false,
    // `{account_url}/X` is `/{repo}/_account/X`: the repo comes from the proxy's header, always. A path that itself
    // looks like `/{other}/_account/...` stays under the proxy's repo (404), so the path cannot override the header.
    rewriteUrl: (raw) => {
      const r = fromProxy(raw);
      const url = raw.url ?? '/';
      if (r) routed.set(raw, r);
      if (!r || !r.repo) return url;
      return `/${encodeURIComponent(r.repo)}/_account${url.startsWith('/') ? url : `/${url}`}`;
    },
  });
  app.decorateRequest('org', '');
  app.addHook('onRequest', async (req) => {
    const r = routed.get(req.raw);
    stripSpoofableHeaders(req.headers);
    if (r) {
      req.org = checkOrg(r.org);
      checkRepo(r.repo);
      req.headers.host = r.host; // the org host the browser used: cookies, redirect URIs and same-site checks need it
      setForwardedInfo(req, { https: r.https, ip: r.ip });
      chargeToClient(req.raw, r.ip); // the browser's address, not the proxy's: each client its own share of the budget
    } else {
      req.org = orgFromHost(req.headers.host, opts.config.baseDomain);
    }
  });
  // Every route of the plugin, so that its path without the repo can say where it is (below).
  const repoRoutes: { method: string; url: string }[] = [];
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) if (route.url.startsWith(REPO_PREFIX) && method !== 'HEAD') repoRoutes.push({ method, url: route.url.slice(REPO_PREFIX.length) || '/' });
  });
  app.register(opts.service.plugin, { prefix: REPO_PREFIX });
  // SPEC 7's own path: a forward-auth check (nginx auth_request, Traefik ForwardAuth) calls `{account_url}/verify`,
  // the org from Host; a session is per org, so no repo is needed.
  app.get('/verify', (req, reply) => sendVerify(opts.service.sessions, req, reply));
  // `{account_url}/login` and the rest need a repo, which only the proxy gives: a precise 404 says where they are.
  app.register(async (root) => {
    for (const { method, url } of repoRoutes) {
      if (!root.hasRoute({ method, url })) root.route({ method, url, handler: (req, reply) => needsRepo(req, reply, opts.config.baseDomain) });
    }
  });
  return app;
}

const REPO_PREFIX = '/:repo/_account';

function needsRepo(req: FastifyRequest, reply: FastifyReply, baseDomain: string): FastifyReply {
  const path = req.url.split('?')[0]!.slice(0, 200);
  const err = new ApiError('not_found', `${req.method} ${path} needs a repo: it is /{repo}/_account${path}, opened through the proxy on the organization's host, e.g. http://${req.org}.${baseDomain}:8080/web/_account${path} (docs/accounts.md, "Running the account service alone")`);
  // No "Your account" button: /login/_account/ (the path read as a repo) is no one's account page.
  return wantsHtml(req) ? sendErrorPage(req, reply, err.status, err.code, err.message, null) : sendError(reply, err);
}
