// What the account service offers the rest of the product: session resolution (for verify, apps and credentials).
import { createHmac } from 'node:crypto';
import type { FastifyRequest } from 'fastify';

export interface SessionUser {
  id: string;
  name: string | null;
  email: string | null;
  login: string | null;
  avatarUrl: string | null;
}

export interface ResolvedSession {
  user: SessionUser;
  sessionId: string;
  expiresAt: Date;
  org: string;
}

/** Reads the session cookie of a request on an org host; null when there is no valid session for request.org. */
export type SessionResolver = (req: FastifyRequest) => Promise<ResolvedSession | null>;

/**
 * The header with which `scopebase serve account` signs each answer to the proxy: a gateway between them (nginx, a
 * load balancer) answering for it cannot make it, even one that echoes every request header (the x-request-id too).
 */
export const ANSWER_MARK_HEADER = 'x-scopebase-account-answer';

/** The mark of the answer to the request with this id, keyed with the proxy token that request carried. */
export function answerMark(proxyToken: string, requestId: string): string {
  return createHmac('sha256', proxyToken).update(requestId).digest('base64url');
}
