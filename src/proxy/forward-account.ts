// When the account service runs as its own process: the proxy forwards /{repo}/_account/* to it with routing headers
// it signs with the proxy token, and asks its /verify for app sessions.
import type { IncomingMessage } from 'node:http';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { request } from 'undici';
import { ApiError } from '../shared/errors.ts';
import { checkRepo, withoutTrailingSlashes } from '../shared/names.ts';
import { ANSWER_MARK_HEADER, answerMark, type ResolvedSession, type SessionResolver } from '../account/contract.ts';
import { readCookie, SESSION_COOKIE } from '../account/cookies.ts';
import { createAgent, endToEndHeaders, forwardedHeaders, forwardHttp, streamBodies, urlUnder } from './forward.ts';
import { trustedPeers } from '../shared/trusted-peers.ts';
import { PART_POOL_CONNECTIONS } from '../shared/connection-cap.ts';
import { collectBody, declaresBody } from '../shared/body-budget.ts';
import { ACCOUNT_BODY_LIMIT } from '../account/service.ts';
import { requestIdOf } from '../shared/raw-route.ts';

export interface RemoteAccountOptions { accountUrl: string; proxyToken: string; trustedProxies: string[] }

/**
 * A 5xx that is not the account service's own: a gateway at ACCOUNT_SERVICE_URL (nginx, a load balancer) answering for
 * a service it could not reach. The service signs every answer to the proxy (ANSWER_MARK_HEADER, keyed with the proxy
 * token): a gateway cannot make that mark, even one that echoes every request header (it was told apart by the
 * echoed x-request-id). What the gateway said (a page of its own) becomes 503 unavailable with Retry-After.
 */
export function gatewayFailure(status: number, mark: unknown, requestId: string, proxyToken: string): ApiError | null {
  if (status < 500 || mark === answerMark(proxyToken, requestId)) return null;
  return new ApiError('unavailable', `the account service is not reachable right now: the gateway in front of it answered HTTP ${status}`, undefined, { 'retry-after': '5' });
}

/** The trusted routing headers the standalone account service reads (SPEC 8: only from the proxy). */
export function routingHeaders(req: FastifyRequest, repo: string, proxyToken: string): Record<string, string> {
  return {
    'x-scopebase-proxy-token': proxyToken,
    'x-scopebase-org': req.org,
    'x-scopebase-repo': repo,
    'x-scopebase-host': String(req.headers.host ?? ''),
    'x-scopebase-proto': req.protocol,
    'x-scopebase-client-ip': req.ip,
  };
}

/** A request's body, up to the account service's own limit, counted in the budget as its client's (an error: answered with connection: close). */
function readBody(req: FastifyRequest, reply: FastifyReply): Promise<Buffer> {
  return new Promise((resolve, reject) => collectBody(req.raw, reply.raw, ACCOUNT_BODY_LIMIT, (body) => (body instanceof ApiError ? reject(body) : resolve(body)), req.ip));
}

export interface RemoteAccount {
  plugin: FastifyPluginAsync;
  resolveSession: SessionResolver;
  /** Throws 503 `unavailable` when the account service cannot answer now: not signed in then is not known. */
  signInReachable(req: FastifyRequest): Promise<void>;
  /** The Set-Cookie the account service sent when resolving this request renewed the session (for the app's answer). */
  renewalCookie(req: FastifyRequest): string | null;
  close(): Promise<void>;
}

export function createRemoteAccount(opts: RemoteAccountOptions): RemoteAccount {
  // Bounded: unbounded, a burst opened more connections than `serve account` takes from one address, and it refused them.
  const agent = createAgent(PART_POOL_CONNECTIONS);
  const renewed = new WeakMap<IncomingMessage, string>();
  const isTrusted = trustedPeers(opts.trustedProxies);
  const base = withoutTrailingSlashes(opts.accountUrl);

  const handler = async (req: FastifyRequest<{ Params: { repo: string } }>, reply: FastifyReply) => {
    const repo = checkRepo(req.params.repo);
    const rest = req.url.replace(/^\/[^/?]*\/_account/, '') || '/';
    const headers = {
      ...endToEndHeaders(req.headers),
      ...forwardedHeaders(req.raw, isTrusted(req.socket.remoteAddress), `/${req.params.repo}/_account`),
      ...routingHeaders(req, repo, opts.proxyToken),
    };
    // The body is read here first: streamed, a client sending it slowly held one of the pool's connections for as long.
    const body = declaresBody(req.raw) ? await readBody(req, reply) : undefined;
    return forwardHttp(req, reply, urlUnder(base, rest.startsWith('/') ? rest : `/${rest}`), headers, agent, 'account service', [],
      (res, id) => gatewayFailure(res.statusCode, res.headers[ANSWER_MARK_HEADER], id, opts.proxyToken), body);
  };

  const plugin: FastifyPluginAsync = async (app) => {
    streamBodies(app);
    app.all('/', handler);
    app.all('/*', handler);
  };

  const hasSessionCookie = (req: FastifyRequest) => readCookie(req.headers.cookie, SESSION_COOKIE.http) !== null || readCookie(req.headers.cookie, SESSION_COOKIE.https) !== null;

  /** /verify's answer for this request's cookie (none: whether the service answers at all); unreachable is 503. */
  const askVerify = async (req: FastifyRequest, sent: string | null): Promise<ResolvedSession | null> => {
    const repo = /^\/([^/?]*)/.exec(req.url ?? '')?.[1] ?? '';
    // An upgrade's view (sessionView) has no Fastify id: the id it is answered with, the caller's or a fresh one.
    const id = typeof req.id === 'string' ? req.id : requestIdOf(req.raw);
    const headers = { ...(sent === null ? {} : { cookie: sent }), accept: 'application/json', 'x-request-id': id, ...routingHeaders(req, repo.toLowerCase(), opts.proxyToken) };
    let res;
    try {
      res = await request(`${base}/verify`, { headers, dispatcher: agent, headersTimeout: 10_000, bodyTimeout: 10_000 });
    } catch {
      throw new ApiError('unavailable', 'the account service is not reachable right now', undefined, { 'retry-after': '5' });
    }
    const failed = gatewayFailure(res.statusCode, res.headers[ANSWER_MARK_HEADER], id, opts.proxyToken);
    if (failed !== null) {
      await res.body.dump().catch(() => {});
      throw failed;
    }
    const body = (await res.body.json().catch(() => null)) as { user?: ResolvedSession['user']; session?: { expiresAt: string }; org?: string; error?: { message?: unknown } } | null;
    if (res.statusCode === 401) return null;
    // Its own 5xx (busy at its connection cap, …): what it said is passed on, not taken for no answer.
    if (res.statusCode >= 500 && typeof body?.error?.message === 'string') {
      throw new ApiError('unavailable', `the account service could not check the session: ${body.error.message.slice(0, 200)}`, undefined, { 'retry-after': String(res.headers['retry-after'] ?? '5') });
    }
    if (res.statusCode !== 200 || !body?.user || !body.session) throw new ApiError('unavailable', 'the account service gave no usable answer', undefined, { 'retry-after': '5' });
    // A renewal's Set-Cookie (only ever the session cookie) is handed to the app's answer, as in-process.
    const set = res.headers['set-cookie'];
    const cookie = (Array.isArray(set) ? set : set === undefined ? [] : [set]).find((c) => /^(__Host-)?session=/.test(c));
    if (cookie) renewed.set(req.raw, cookie);
    return { user: body.user, sessionId: '', expiresAt: new Date(body.session.expiresAt), org: body.org ?? req.org };
  };

  // Apps need the user: ask the account service's /verify with the browser's cookie.
  const resolveSession: SessionResolver = async (req) => {
    // No session cookie at all: nothing to ask (saves a round trip per anonymous app request).
    if (!hasSessionCookie(req)) return null;
    return askVerify(req, String(req.headers.cookie));
  };

  // A cookie was already checked by resolveSession; without one, one cheap /verify says whether sign-in can work now.
  const signInReachable = async (req: FastifyRequest): Promise<void> => {
    if (!hasSessionCookie(req)) await askVerify(req, null);
  };

  const renewalCookie = (req: FastifyRequest): string | null => {
    const cookie = renewed.get(req.raw) ?? null;
    renewed.delete(req.raw);
    return cookie;
  };

  return { plugin, resolveSession, signInReachable, renewalCookie, close: () => agent.close() };
}
