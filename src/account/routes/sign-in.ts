// GET /login and GET /callback: the OAuth / OIDC sign-in (SPEC 7). Pending state lives server-side, one use, ten minutes.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import * as oidc from 'openid-client';
import { ApiError } from '../../shared/errors.ts';
import { answerError, sendError, toApiError } from '../../shared/http.ts';
import { checkRepo } from '../../shared/names.ts';
import { clearCookie, cookieName, LOGIN_COOKIE, readCookie, serializeCookie } from '../cookies.ts';
import { escapeHtml, sendPage } from '../../shared/html-page.ts';
import type { SignInProvider } from '../providers/index.ts';
import { RateLimiter } from '../../shared/rate-limit.ts';
import { requestInfo } from '../request-info.ts';
import { clientKey } from '../../shared/trusted-peers.ts';
import { wantsHtml } from '../../shared/html-page.ts';
import { safeReturnTo } from '../return-to.ts';
import type { Sessions } from '../sessions.ts';
import type { AccountStore } from '../store.ts';
import { isTokenShaped, newToken } from '../tokens.ts';
import { Counter } from 'prom-client';
import { metrics } from '../../shared/metrics.ts';

const signIns = new Counter({ name: 'scopebase_sign_ins_total', help: 'Sign-ins: started (sent to a provider), succeeded (a session made), failed (refused at /login or /callback)', labelNames: ['outcome'], registers: [metrics] });

export interface SignInDeps {
  providers: SignInProvider[];
  store: AccountStore;
  sessions: Sessions;
  limiter: SignInLimits;
  /** ACCOUNT_MAX_PENDING_LOGINS: pending sign-ins held at once, across all addresses (a distributed flood of /login). */
  maxPendingLogins: number;
}

const PENDING_TTL_MS = 10 * 60_000;

/** A /48 may start this many times the sign-ins of one client: a site's many users, not one holder's 65,536 /64s. */
const NETWORK_FACTOR = 10;

/**
 * Sign-in attempts counted per client (an IPv6 /64) and per IPv6 /48: one holder of a /48 (tunnel brokers hand them
 * out) rotating through its /64s filled ACCOUNT_MAX_PENDING_LOGINS, and every org's /login was 503.
 */
export class SignInLimits {
  private readonly client: RateLimiter;
  private readonly network: RateLimiter;

  constructor(rate: { burst: number; perMinute: number }) {
    this.client = new RateLimiter({ ...rate, refusal: 'too many sign-in attempts from this address' });
    this.network = new RateLimiter({ burst: rate.burst * NETWORK_FACTOR, perMinute: rate.perMinute * NETWORK_FACTOR, refusal: 'too many sign-in attempts from this network' });
  }

  /** Takes one attempt for `ip` or throws 429 rate_limited with Retry-After. */
  take(ip: string): void {
    this.client.take(clientKey(ip));
    if (ip.includes(':') && !ip.toLowerCase().startsWith('::ffff:')) this.network.take(clientKey(ip, 48));
  }
}

type Req = FastifyRequest<{ Params: { repo: string }; Querystring: Record<string, string | string[] | undefined> }>;

function one(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? undefined : v;
}

function sha256hex(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function chooserPage(reply: FastifyReply, repo: string, providers: SignInProvider[], returnTo: string): FastifyReply {
  const items = providers.map((p) => {
    const href = `/${repo}/_account/login?${new URLSearchParams({ provider: p.id, return_to: returnTo })}`;
    return `<li><a class="button" href="${escapeHtml(href)}">Sign in with ${escapeHtml(p.label)}</a></li>`;
  }).join('\n');
  return sendPage(reply, 200, 'Sign in', `<h1>Sign in</h1>\n<p class="muted">Choose how to sign in to <code>${escapeHtml(repo)}</code>.</p>\n<ul class="providers">\n${items}\n</ul>`);
}

/** Where a failed sign-in started from (its return_to), so "start again" leads back to the same page. */
const returnTos = new WeakMap<FastifyRequest['raw'], string>();

function failurePage(reply: FastifyReply, repo: string, err: ApiError, returnTo: string | undefined): FastifyReply {
  if (err.headers) reply.headers(err.headers);
  const again = `/${repo}/_account/login${returnTo ? `?${new URLSearchParams({ return_to: returnTo })}` : ''}`;
  return sendPage(reply, err.status, 'Sign-in failed', `<h1>Sign-in failed</h1>
<div class="card error" role="alert"><p>${escapeHtml(err.message)}</p><p class="muted">Error code: <code>${escapeHtml(err.code)}</code></p></div>
<p><a class="button primary" href="${escapeHtml(again)}">Start the sign-in again</a></p>`);
}

/** The same error with what the person can do next appended (the provider's errors say only what went wrong). */
function withAdvice(err: unknown, advice: string): unknown {
  return err instanceof ApiError ? new ApiError(err.code, `${err.message}; ${advice}`, err.details, err.headers) : err;
}

export async function signInRoutes(app: FastifyInstance, deps: SignInDeps): Promise<void> {
  // Browser flows get a readable page with the right status; API callers get SPEC 3's JSON.
  app.setErrorHandler((err, req: Req, reply) => {
    const e = toApiError(err, req);
    signIns.inc({ outcome: 'failed' });
    if (e.code !== 'internal' && e.code !== 'rate_limited') req.log.info({ code: e.code, details: e.details }, 'sign-in refused');
    let repo: string;
    try {
      repo = checkRepo(req.params.repo);
    } catch {
      return answerError(req, reply, e);
    }
    return wantsHtml(req) ? failurePage(reply, repo, e, returnTos.get(req.raw)) : sendError(reply, e);
  });

  app.get('/login', async (req: Req, reply) => {
    const repo = checkRepo(req.params.repo);
    const info = requestInfo(req);
    deps.limiter.take(info.ip);
    // SPEC 7: no (or a bad) return_to is /{repo}/ — the app, or with none the landing page (proxy/landing.ts).
    const returnTo = safeReturnTo(one(req.query.return_to), repo);
    returnTos.set(req.raw, returnTo);
    const wanted = one(req.query.provider);
    let provider: SignInProvider | undefined;
    if (wanted !== undefined && wanted !== '') {
      provider = deps.providers.find((p) => p.id === wanted);
      if (!provider) throw new ApiError('invalid_request', `unknown provider ${JSON.stringify(wanted.slice(0, 40))}`, { providers: deps.providers.map((p) => p.id) });
    } else if (deps.providers.length > 1) {
      return chooserPage(reply, repo, deps.providers, returnTo);
    } else {
      provider = deps.providers[0]!;
    }

    // The binding cookie ties the pending sign-in to this browser, so a stolen callback URL cannot sign someone else in.
    const existing = readCookie(req.headers.cookie, cookieName(LOGIN_COOKIE, info.https));
    const binding = isTokenShaped(existing) ? existing : newToken();
    const state = oidc.randomState();
    const codeVerifier = oidc.randomPKCECodeVerifier();
    const nonce = provider.usesNonce ? oidc.randomNonce() : null;
    const redirectUri = `${info.https ? 'https' : 'http'}://${req.headers.host}/${repo}/_account/callback`;
    const codeChallenge = await oidc.calculatePKCECodeChallenge(codeVerifier);
    // Nothing is used up yet: the same /login works once the provider answers.
    const url = await provider.authorizationUrl({ redirectUri, state, codeChallenge, nonce }).catch((err: unknown) => {
      throw err instanceof ApiError && err.code === 'unavailable' ? withAdvice(err, 'try again in a moment') : err;
    });
    const full = deps.store.savePending(state, { provider: provider.id, org: req.org, repo, codeVerifier, nonce, returnTo, redirectUri, binding: sha256hex(binding) }, PENDING_TTL_MS, deps.maxPendingLogins);
    if (full) {
      // Finished sign-ins free rows before the oldest expires, so a minute at most, not up to ten.
      const retryAfter = Math.min(60, Math.max(1, Math.ceil(full.fullForMs / 1000)));
      throw new ApiError('unavailable', 'too many sign-ins are in progress on this server at once; try again in a moment', { pendingLimit: deps.maxPendingLogins }, { 'retry-after': String(retryAfter) });
    }
    reply.header('set-cookie', serializeCookie(cookieName(LOGIN_COOKIE, info.https), binding, PENDING_TTL_MS / 1000, info.https));
    reply.header('cache-control', 'no-store');
    signIns.inc({ outcome: 'started' });
    return reply.redirect(url.href, 302);
  });

  app.get('/callback', async (req: Req, reply) => {
    const repo = checkRepo(req.params.repo);
    const info = requestInfo(req);
    deps.limiter.take(info.ip);
    const state = one(req.query.state);
    const pending = state ? deps.store.takePending(state) : null;
    const bindingName = cookieName(LOGIN_COOKIE, info.https);
    const binding = readCookie(req.headers.cookie, bindingName);
    // Whatever the outcome, a binding cookie no pending sign-in holds any more is cleared (another tab's keeps it).
    if (binding !== null && !(isTokenShaped(binding) && deps.store.hasPendingBinding(sha256hex(binding)))) reply.header('set-cookie', clearCookie(bindingName, info.https));
    if (!state) throw new ApiError('invalid_request', 'the sign-in callback has no state; start the sign-in again');
    if (!pending) throw new ApiError('invalid_request', 'this sign-in has expired or was already used; start it again');
    returnTos.set(req.raw, pending.returnTo);
    if (pending.org !== req.org || pending.repo !== repo) throw new ApiError('invalid_request', 'this sign-in was started for another organization or repository');
    if (!isTokenShaped(binding) || !sameHash(sha256hex(binding), pending.binding)) {
      throw new ApiError('invalid_request', 'this sign-in was started in another browser; start it again here');
    }
    const provider = deps.providers.find((p) => p.id === pending.provider);
    if (!provider) throw new ApiError('invalid_request', 'the provider of this sign-in is no longer configured');

    const callbackUrl = new URL(pending.redirectUri);
    callbackUrl.search = new URL(req.url, 'http://x').search;
    // The pending state is used up (one use): whatever failed, retrying this callback cannot work.
    const signedIn = await provider.finish({ callbackUrl, state, codeVerifier: pending.codeVerifier, nonce: pending.nonce }).catch((err: unknown) => {
      throw withAdvice(err, 'start the sign-in again');
    });
    const user = deps.store.upsertUser(provider.namespace, signedIn.subject, signedIn.profile);
    deps.sessions.issue(req, reply, user.id);
    req.log.info({ userId: user.id, provider: provider.id }, 'signed in');
    signIns.inc({ outcome: 'succeeded' });
    reply.header('cache-control', 'no-store');
    return reply.redirect(pending.returnTo, 302);
  });
}
