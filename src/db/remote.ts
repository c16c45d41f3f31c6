// The database control service as its own process: its HTTP server, and the proxy's client for it.
// The service trusts the org/repo headers only with the proxy token, which is derived from the root key.
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Pool } from 'undici';
import type { Config } from '../shared/config.ts';
import { ApiError } from '../shared/errors.ts';
import { createHttpApp } from '../shared/http.ts';
import type { Logger } from '../shared/log.ts';
import { checkOrg, checkRepo } from '../shared/names.ts';
import { deriveKey } from '../shared/secrets.ts';
import type { DbHandler, DbRequest, DbResponse } from './contract.ts';
import type { DbService } from './service.ts';

export const PROXY_TOKEN_HEADER = 'x-scopebase-proxy-token';

export function proxyToken(rootKey: Buffer): string {
  return deriveKey(rootKey, 'proxy-token').toString('base64url');
}

function tokenMatches(config: Config, given: string | string[] | undefined): boolean {
  if (typeof given !== 'string') return false;
  const g = Buffer.from(given);
  let ok = false;
  for (const key of config.rootKeys) {
    const want = Buffer.from(proxyToken(key));
    if (g.length === want.length && timingSafeEqual(g, want)) ok = true;
  }
  return ok;
}

/** `scopebase serve db`: the same routes as through the proxy, for the proxy only. */
export function createDbServer({ config, logger, db }: { config: Config; logger: Logger; db: DbService }): FastifyInstance {
  const app = createHttpApp({ logger, bodyLimit: config.db.maxBodyBytes });
  app.post<{ Params: { repo: string; op: string } }>('/:repo/_db/:op', async (req, reply) => {
    if (!tokenMatches(config, req.headers[PROXY_TOKEN_HEADER])) throw new ApiError('forbidden', 'the database control service only answers the proxy');
    const org = checkOrg(String(req.headers['x-scopebase-org'] ?? ''));
    const res = await db.handle({
      op: req.params.op, org, repo: checkRepo(req.params.repo), authorization: req.headers.authorization,
      body: Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0), requestId: req.id,
    });
    reply.code(res.status);
    if (res.headers) reply.headers(res.headers);
    return reply.send(res.body);
  });
  return app;
}

/** The proxy's side: forwards /_db requests over a keep-alive pool, streaming the reply body. */
export function createRemoteDb({ url, rootKey }: { url: string; rootKey: Buffer }): DbHandler & { close(): Promise<void> } {
  const pool = new Pool(url, { connections: 64, pipelining: 1 });
  const token = proxyToken(rootKey);
  return {
    async handle(req: DbRequest): Promise<DbResponse> {
      const headers: Record<string, string> = { 'x-scopebase-org': req.org, [PROXY_TOKEN_HEADER]: token, 'x-request-id': req.requestId, 'content-type': 'application/json' };
      if (req.authorization !== undefined) headers.authorization = req.authorization;
      let res;
      try {
        res = await pool.request({ method: 'POST', path: `/${req.repo}/_db/${encodeURIComponent(req.op)}`, headers, body: req.body });
      } catch {
        throw new ApiError('unavailable', 'the database control service cannot be reached', undefined, { 'retry-after': '1' });
      }
      const out: Record<string, string> = {};
      for (const name of ['content-type', 'x-db-version', 'www-authenticate', 'retry-after']) {
        const v = res.headers[name];
        if (typeof v === 'string') out[name] = v;
      }
      return { status: res.statusCode, headers: out, body: res.body };
    },
    close: () => pool.close(),
  };
}
