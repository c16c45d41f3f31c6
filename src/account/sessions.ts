// Session cookies (SPEC 7): issue, resolve with renewal on use, revoke. Only token hashes reach the store.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedSession, SessionResolver } from './contract.ts';
import { clearCookie, cookieName, readCookie, serializeCookie, SESSION_COOKIE } from './cookies.ts';
import { requestInfo } from './request-info.ts';
import type { AccountStore } from './store.ts';
import { isTokenShaped } from './tokens.ts';
import { isDiskFull } from '../shared/errors.ts';

export class Sessions {
  private readonly store: AccountStore;
  private readonly ttlMs: number;
  /** Renew at most this often per session, so busy pages do not write on every request. */
  private readonly renewEveryMs: number;
  /** Requests whose session was renewed: their response re-sends the cookie with a fresh Max-Age. */
  private readonly renewed = new WeakMap<FastifyRequest['raw'], { token: string; https: boolean }>();

  constructor(store: AccountStore, ttlMs: number) {
    this.store = store;
    this.ttlMs = ttlMs;
    this.renewEveryMs = Math.min(ttlMs / 10, 3_600_000);
  }

  /** The session token the browser sent, under the cookie name its scheme allows. */
  private token(req: FastifyRequest): string | null {
    const value = readCookie(req.headers.cookie, cookieName(SESSION_COOKIE, requestInfo(req).https));
    return isTokenShaped(value) ? value : null;
  }

  readonly resolve: SessionResolver = async (req) => {
    const token = this.token(req);
    if (!token) return null;
    const now = Date.now();
    const found = this.store.findSession(token, now);
    // A session belongs to one org: on another org's host the same cookie is simply not valid.
    if (!found || found.org !== req.org) return null;
    let expiresAt = found.expiresAt;
    if (now - found.renewedAt >= this.renewEveryMs && this.renew(found, now + this.ttlMs, now)) {
      expiresAt = now + this.ttlMs;
      this.renewed.set(req.raw, { token, https: requestInfo(req).https });
    }
    const session: ResolvedSession = { user: found.user, sessionId: found.id, expiresAt: new Date(expiresAt), org: found.org };
    return session;
  };

  /**
   * Extends a session; false when the disk is full: the session stays valid until its current end and is renewed on a
   * later request (every page, app request and /verify of a signed-in user answered 507 while it was full).
   */
  private renew(found: Parameters<AccountStore['renewSession']>[0], expiresAt: number, now: number): boolean {
    try {
      this.store.renewSession(found, expiresAt, now);
      return true;
    } catch (e) {
      if (isDiskFull(e)) return false;
      throw e;
    }
  }

  /**
   * Starts a session for `userId` in the request's org and sets the cookie on `reply`. A session of this org the
   * browser still held ends: its cookie is replaced, and left valid it would outlive every sign-out of the new one.
   * Another org's session sent here is not this host's to end (SPEC 7).
   */
  issue(req: FastifyRequest, reply: FastifyReply, userId: string): void {
    const previous = this.token(req);
    if (previous) this.store.deleteSession(previous, req.org);
    const { token } = this.store.createSession(req.org, userId, this.ttlMs);
    const https = requestInfo(req).https;
    reply.header('set-cookie', serializeCookie(cookieName(SESSION_COOKIE, https), token, this.ttlMs / 1000, https));
  }

  /** Ends the request's session server-side (if any, and only one of the request's org) and clears the cookie. */
  revoke(req: FastifyRequest, reply: FastifyReply): void {
    const token = this.token(req);
    if (token) this.store.deleteSession(token, req.org);
    this.renewed.delete(req.raw);
    const https = requestInfo(req).https;
    reply.header('set-cookie', clearCookie(cookieName(SESSION_COOKIE, https), https));
  }

  /** The Set-Cookie that extends the browser's cookie after a renewal, or null. */
  renewalCookie(req: FastifyRequest): string | null {
    const r = this.renewed.get(req.raw);
    if (!r) return null;
    this.renewed.delete(req.raw);
    return serializeCookie(cookieName(SESSION_COOKIE, r.https), r.token, this.ttlMs / 1000, r.https);
  }
}
