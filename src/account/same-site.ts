// SPEC 7: writes with the session cookie are refused when Origin or Sec-Fetch-Site says cross-site.
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../shared/errors.ts';

export function assertSameSite(req: FastifyRequest): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new ApiError('forbidden', 'cross-site requests may not change account state');
  }
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let host: string;
    try {
      host = new URL(origin).host.toLowerCase();
    } catch {
      throw new ApiError('forbidden', 'cross-site requests may not change account state');
    }
    if (host !== String(req.headers.host ?? '').toLowerCase()) {
      throw new ApiError('forbidden', 'cross-site requests may not change account state');
    }
  }
}
