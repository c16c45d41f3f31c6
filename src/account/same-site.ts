// SPEC 7: writes with the session cookie are refused when Origin or Sec-Fetch-Site says cross-site.
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../shared/errors.ts';
import { originMismatch, schemeHint } from '../shared/same-origin.ts';
import { requestInfo } from './request-info.ts';

export function assertSameSite(req: FastifyRequest): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new ApiError('forbidden', 'cross-site requests may not change account state');
  }
  const origin = req.headers.origin;
  if (origin === undefined) return;
  const https = requestInfo(req).https;
  const mismatch = originMismatch(origin, req.headers.host, https);
  if (mismatch === 'scheme') {
    // Most often a TLS-terminating load balancer the server does not trust: say so to whoever reads the error.
    throw new ApiError('forbidden', `cross-site requests may not change account state (${schemeHint(origin, https)})`);
  }
  if (mismatch !== null) throw new ApiError('forbidden', 'cross-site requests may not change account state');
}
