// When the account service runs as its own process: the proxy forwards /{repo}/_account/* to it with routing headers
// it signs with the proxy token, and asks its /verify for app sessions.
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { request } from 'undici';
import { ApiError } from '../shared/errors.ts';
import { checkRepo } from '../shared/names.ts';
import type { ResolvedSession, SessionResolver } from '../account/contract.ts';
import { createAgent, endToEndHeaders, forwardedHeaders, forwardHttp, streamBodies, trustedPeers } from './forward.ts';

export interface RemoteAccountOptions { accountUrl: string; proxyToken: string; trustedProxies: string[] }

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

export function createRemoteAccount(opts: RemoteAccountOptions): { plugin: FastifyPluginAsync; resolveSession: SessionResolver; close(): Promise<void> } {
  const agent = createAgent();
  const isTrusted = trustedPeers(opts.trustedProxies);
  const base = opts.accountUrl.replace(/\/+$/, '');

  const handler = async (req: FastifyRequest<{ Params: { repo: string } }>, reply: FastifyReply) => {
    const repo = checkRepo(req.params.repo);
    const rest = req.url.replace(/^\/[^/?]*\/_account/, '') || '/';
    const headers = {
      ...endToEndHeaders(req.headers),
      ...forwardedHeaders(req.raw, isTrusted(req.socket.remoteAddress), `/${req.params.repo}/_account`),
      ...routingHeaders(req, repo, opts.proxyToken),
    };
    return forwardHttp(req, reply, new URL(base + (rest.startsWith('/') ? rest : `/${rest}`)), headers, agent, 'account service');
  };

  const plugin: FastifyPluginAsync = async (app) => {
    streamBodies(app);
    app.all('/', handler);
    app.all('/*', handler);
  };

  // Apps need the user: ask the account service's /verify with the browser's cookie.
  const resolveSession: SessionResolver = async (req) => {
    if (!req.headers.cookie) return null;
    const repo = /^\/([^/?]*)/.exec(req.url ?? '')?.[1] ?? '';
    const headers = { cookie: String(req.headers.cookie), accept: 'application/json', ...routingHeaders(req, repo.toLowerCase(), opts.proxyToken) };
    let res;
    try {
      res = await request(`${base}/verify`, { headers, dispatcher: agent, headersTimeout: 10_000, bodyTimeout: 10_000 });
    } catch {
      throw new ApiError('unavailable', 'the account service is not reachable right now', undefined, { 'retry-after': '5' });
    }
    const body = (await res.body.json().catch(() => null)) as { user?: ResolvedSession['user']; session?: { expiresAt: string }; org?: string } | null;
    if (res.statusCode === 401) return null;
    if (res.statusCode !== 200 || !body?.user || !body.session) throw new ApiError('unavailable', 'the account service gave no usable answer', undefined, { 'retry-after': '5' });
    // The renewed cookie, if any, is dropped here: the next account page visit extends it.
    return { user: body.user, sessionId: '', expiresAt: new Date(body.session.expiresAt), org: body.org ?? req.org };
  };

  return { plugin, resolveSession, close: () => agent.close() };
}
