// What the account service offers the rest of the product: session resolution (for verify, apps and credentials).
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
