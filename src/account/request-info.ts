// What the account service knows of the browser's side of a request: HTTPS or not, and the client address.
import type { FastifyRequest } from 'fastify';

export interface RequestInfo { https: boolean; ip: string }

// Set only by the standalone server, from headers it accepted because the proxy token was right.
const forwarded = new WeakMap<FastifyRequest['raw'], RequestInfo>();

export function setForwardedInfo(req: FastifyRequest, info: RequestInfo): void {
  forwarded.set(req.raw, info);
}

/** In-process, Fastify's own trustProxy list already decided whether x-forwarded-proto/for count. */
export function requestInfo(req: FastifyRequest): RequestInfo {
  return forwarded.get(req.raw) ?? { https: req.protocol === 'https', ip: req.ip };
}
