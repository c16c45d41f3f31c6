// SPEC 7: writes with the session cookie are refused when Origin or Sec-Fetch-Site says cross-site.
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../shared/errors.ts';
import { requestInfo } from './request-info.ts';

export function assertSameSite(req: FastifyRequest): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new ApiError('forbidden', 'cross-site requests may not change account state');
  }
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let url: URL;
    try {
      url = new URL(origin);
    } catch {
      throw new ApiError('forbidden', 'cross-site requests may not change account state');
    }
    // Schemeful: a page on http:// of the same host is another site than https:// (a network attacker's injection).
    const scheme = requestInfo(req).https ? 'https:' : 'http:';
    if (url.host.toLowerCase() !== String(req.headers.host ?? '').toLowerCase()) {
      throw new ApiError('forbidden', 'cross-site requests may not change account state');
    }
    if (url.protocol !== scheme) {
      // Most often a TLS-terminating load balancer the server does not trust: say so to whoever reads the error.
      throw new ApiError('forbidden', `cross-site requests may not change account state (the page is ${url.protocol}// but this server was reached over ${scheme}//; behind a TLS-terminating proxy, list it in TRUSTED_PROXIES)`);
    }
  }
}
