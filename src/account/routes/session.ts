// GET /verify (forward-auth check) and POST /logout (server-side revocation), SPEC 7.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../../shared/errors.ts';
import { REFUSED_BODY_BYTES, refuseBeforeBody } from '../../shared/body-budget.ts';
import { checkRepo } from '../../shared/names.ts';
import { errorReply, type RawReply } from '../../shared/raw-route.ts';
import { assertSameSite } from '../same-site.ts';
import { wantsHtml } from '../../shared/html-page.ts';
import { safeReturnTo } from '../return-to.ts';
import type { Sessions } from '../sessions.ts';
import { identityHeaders } from '../identity-headers.ts';
import { isSafeMethod, originMismatch } from '../../shared/same-origin.ts';

type Req = FastifyRequest<{ Params: { repo: string } }>;

/** GET /verify's answer: the session's user and identity headers, or 401 (the Fastify route and the proxy's raw route). */
export async function verify(sessions: Sessions, req: FastifyRequest): Promise<RawReply> {
  const session = await sessions.resolve(req);
  const headers: Record<string, string> = { 'cache-control': 'no-store', 'content-type': 'application/json; charset=utf-8' };
  const renewed = sessions.renewalCookie(req);
  if (renewed) headers['set-cookie'] = renewed;
  if (!session) {
    const refused = errorReply(new ApiError('unauthenticated', 'no valid session for this organization; sign in first'));
    return { ...refused, headers: { ...headers, ...refused.headers } };
  }
  if (foreignWrite(req)) {
    // Neither the Origin nor the method is quoted: header values never reach an error (docs/security.md).
    const refused = errorReply(new ApiError('forbidden', 'a write or a WebSocket upgrade from another origin (a page not on this host) is not this organization\'s page: another org\'s host is the same site to a browser, which sends the session along; the request is refused whoever is signed in (docs/security.md, "Org to org")'));
    return { ...refused, headers: { ...headers, ...refused.headers } };
  }
  const { user } = session;
  // The same headers, encoded the same way, as the proxy gives apps.
  Object.assign(headers, identityHeaders(user));
  const body = {
    user: { id: user.id, name: user.name, email: user.email, login: user.login, avatarUrl: user.avatarUrl },
    session: { expiresAt: session.expiresAt.toISOString() },
    org: session.org,
  };
  return { status: 200, headers, body: JSON.stringify(body) };
}

/** The original request's method, as forward-auth proxies pass it (Traefik, Caddy: X-Forwarded-Method; nginx when told). */
const forwardedMethod = (req: FastifyRequest): string => String(req.headers['x-forwarded-method'] ?? req.headers['x-original-method'] ?? '').toUpperCase();

/**
 * A write or an upgrade whose page is on another host (another org's: a sibling subdomain, the same site, so the
 * cookie came along), as the proxy refuses for apps behind it. The host alone is compared: a forward-auth proxy
 * outside TRUSTED_PROXIES makes the scheme unknown here.
 */
function foreignWrite(req: FastifyRequest): boolean {
  const origin = req.headers.origin;
  if (typeof origin !== 'string') return false;
  const method = forwardedMethod(req);
  // A WebSocket's handshake, however the forward-auth proxy passed it: nginx and Traefik drop Upgrade, not these.
  const upgrade = req.headers.upgrade !== undefined || req.headers['sec-websocket-key'] !== undefined || req.headers['sec-websocket-version'] !== undefined;
  if ((method === '' || isSafeMethod(method)) && !upgrade) return false;
  const mismatch = originMismatch(origin, req.headers.host, origin.startsWith('https:'));
  return mismatch === 'host' || mismatch === 'malformed';
}

/** Sends GET /verify's answer through Fastify (under /{repo}/_account, and at the root of `serve account`). */
export async function sendVerify(sessions: Sessions, req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const answer = await verify(sessions, req);
  return reply.code(answer.status).headers(answer.headers ?? {}).send(answer.body);
}

export async function sessionRoutes(app: FastifyInstance, deps: { sessions: Sessions }): Promise<void> {
  app.get('/verify', async (req: Req, reply) => {
    checkRepo(req.params.repo);
    return sendVerify(deps.sessions, req, reply);
  });

  // Anyone may sign out, a stranger too: its body (a form's return_to) is read outside the budget of bodies in
  // flight, as a refused caller's is, and one declared over 16 KiB is 413 unread. Counted, a never-finished body of
  // 1 MiB per connection held the budget, and every tenant's database writes were 503.
  const smallForm = async (req: Req) => {
    refuseBeforeBody(req.raw, new ApiError('payload_too_large', `a sign-out takes no more than a form with return_to: at most ${REFUSED_BODY_BYTES} bytes`, { limitBytes: REFUSED_BODY_BYTES }));
  };
  app.post('/logout', { onRequest: smallForm }, async (req: Req, reply) => {
    const repo = checkRepo(req.params.repo);
    assertSameSite(req);
    deps.sessions.revoke(req, reply);
    reply.header('cache-control', 'no-store');
    // A form post from the account page goes back to a page; an API caller just gets 204.
    const form = Buffer.isBuffer(req.body) && /^application\/x-www-form-urlencoded\b/.test(String(req.headers['content-type'] ?? ''));
    if (form || wantsHtml(req)) {
      const fields = form ? new URLSearchParams((req.body as Buffer).toString('utf8')) : null;
      return reply.redirect(safeReturnTo(fields?.get('return_to') ?? `/${repo}/_account/`, repo), 303);
    }
    return reply.code(204).send();
  });

  // Signing out changes state, so it is a POST (a link or a prefetch must not sign anyone out); a person who typed
  // the address is told where the button is, in SPEC 3's 404 for a route that is not there.
  app.get('/logout', async (req: Req) => {
    const repo = checkRepo(req.params.repo);
    throw new ApiError('not_found', `signing out is POST /${repo}/_account/logout: use the Sign out button on your account page, /${repo}/_account/`);
  });
}
