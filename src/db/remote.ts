// The database control service as its own process: its HTTP server, and the proxy's client for it.
// The service trusts the org/repo headers only with the proxy token, which is derived from the root key.
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { Pool, type Dispatcher } from 'undici';
import type { Config } from '../shared/config.ts';
import { registerImportRoute } from './import.ts';
import { LAST_MIGRATION_HEADER } from './contract.ts';
import { ApiError } from '../shared/errors.ts';
import { PART_POOL_CONNECTIONS, refuseUpgrade, type ConnectionCap } from '../shared/connection-cap.ts';
import { createHttpApp } from '../shared/http.ts';
import type { RawRoute } from '../shared/raw-route.ts';
import { admitDbHeaders } from './admit.ts';
import type { Logger } from '../shared/log.ts';
import { checkOrg, checkRepo } from '../shared/names.ts';
import { deriveKey } from '../shared/secrets.ts';
import type { DbHandler, DbRequest, DbResponse } from './contract.ts';
import type { DbService } from './service.ts';
import { ChannelClient, ChannelServer, outcomeUnknown } from './channel.ts';

export const PROXY_TOKEN_HEADER = 'x-scopebase-proxy-token';

export function proxyToken(rootKey: Buffer): string {
  return deriveKey(rootKey, 'proxy-token').toString('base64url');
}

/** A check of the proxy token against every root key's (derived once: this runs per request). */
function proxyTokenCheck(rootKeys: Buffer[]): (given: string | string[] | undefined) => boolean {
  const wanted = rootKeys.map((key) => Buffer.from(proxyToken(key)));
  return (given) => {
    if (typeof given !== 'string') return false;
    const g = Buffer.from(given);
    let ok = false;
    for (const want of wanted) if (g.length === want.length && timingSafeEqual(g, want)) ok = true;
    return ok;
  };
}

/** The path the proxy's client builds: a checked repo and the op, URI-encoded (nothing else is served). */
const DB_PATH = /^\/([^/?%#]+)\/_db\/([^/?#]+)$/;

function decodeOp(op: string): string {
  try {
    return decodeURIComponent(op);
  } catch {
    throw new ApiError('not_found', 'malformed operation name');
  }
}

/** `scopebase serve db`: the same routes as through the proxy, for the proxy only, served off node:http (raw-route.ts). */
export function createDbServer({ config, logger, db, connections }: { config: Config; logger: Logger; db: DbService; connections: ConnectionCap }): FastifyInstance {
  const fromProxy = proxyTokenCheck(config.rootKeys);
  // The proxy token first (nothing else is answered to anyone else), then, as at the proxy, names and the repo secret
  // on the headers, before any of the body is read: the proxy checked them too, this side does not rely on it.
  const dbRoute: RawRoute<{ org: string; repo: string; op: string; authenticated: boolean }> = {
    admit: (req) => {
      if (!fromProxy(req.headers[PROXY_TOKEN_HEADER])) throw new ApiError('forbidden', 'the database control service only answers the proxy');
      const [, rawRepo, rawOp] = DB_PATH.exec(req.url!)!;
      const org = checkOrg(String(req.headers['x-scopebase-org'] ?? ''));
      const repo = checkRepo(rawRepo!);
      const op = decodeOp(rawOp!);
      return { org, repo, op, authenticated: admitDbHeaders(req, config.rootKeys, org, repo, op) };
    },
    handle: async (req, body, requestId, { org, repo, op, authenticated }) => db.handle({ op, org, repo, authorization: req.headers.authorization, authenticated, body, requestId }),
  };
  const app = createHttpApp({ logger, bodyLimit: config.db.maxBodyBytes, connections, rawRoutes: (req) => (req.method === 'POST' && DB_PATH.test(req.url!) && !req.url!.endsWith('/_db/import') ? dbRoute as RawRoute : null) });
  void registerImportRoute(app, async (req, upload) => {
    if (!fromProxy(req.headers[PROXY_TOKEN_HEADER])) throw new ApiError('forbidden', 'the database control service only answers the proxy');
    const org = checkOrg(String(req.headers['x-scopebase-org'] ?? ''));
    return db.handle({ op: 'import', org, repo: checkRepo((req.params as { repo: string }).repo), authorization: req.headers.authorization, body: Buffer.alloc(0), requestId: req.id, upload });
  });
  const channel = new ChannelServer({ db, logger, maxBodyBytes: config.db.maxBodyBytes, fromProxy, tokenHeader: PROXY_TOKEN_HEADER });
  app.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
    if (!refuseUpgrade(req, socket)) channel.accept(req, socket, head);
  });
  app.addHook('preClose', async () => channel.close());
  return app;
}

/** The headers of the service's reply that the proxy passes on. */
const PASSED_ON = ['content-type', 'content-disposition', 'x-db-version', LAST_MIGRATION_HEADER, 'www-authenticate', 'retry-after'];

const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);

/** A failed hop: before a connection, nothing was applied; after it, a write may or may not have been. */
function remoteFailure(err: unknown): ApiError {
  if (NOT_CONNECTED.has((err as { code?: string }).code ?? '')) return new ApiError('unavailable', 'the database control service cannot be reached', undefined, { 'retry-after': '1' });
  return outcomeUnknown();
}

/** The proxy's side: requests go over the channel (channel.ts), over HTTP while it connects; snapshots always over HTTP. */
export function createRemoteDb({ url, rootKey }: { url: string; rootKey: Buffer }): DbHandler & { close(): Promise<void> } {
  const pool = new Pool(url, { connections: PART_POOL_CONNECTIONS, pipelining: 1 });
  const token = proxyToken(rootKey);
  const channel = new ChannelClient({ url, token, tokenHeader: PROXY_TOKEN_HEADER });
  return {
    async handle(req: DbRequest): Promise<DbResponse> {
      if (req.upload) return forwardUpload(pool, token, req);
      const streamed = req.op === 'snapshot' || req.op === 'export'; // files come over HTTP, as they are made
      const viaChannel = streamed ? null : channel.trySend(req);
      if (viaChannel) return viaChannel;
      const headers: Record<string, string> = { 'x-scopebase-org': req.org, [PROXY_TOKEN_HEADER]: token, 'x-request-id': req.requestId, 'content-type': 'application/json' };
      if (req.authorization !== undefined) headers.authorization = req.authorization;
      const options = { method: 'POST' as const, path: `/${req.repo}/_db/${encodeURIComponent(req.op)}`, headers, body: req.body };
      if (!streamed) return dispatchBuffered(pool, options);
      let res;
      try {
        res = await pool.request(options);
      } catch (e) {
        throw remoteFailure(e);
      }
      // A file's length goes on too: clients show progress against it.
      const length = res.statusCode === 200 ? res.headers['content-length'] : undefined;
      return { status: res.statusCode, headers: { ...passedOn(res.headers), ...(typeof length === 'string' ? { 'content-length': length } : {}) }, body: res.body };
    },
    async close() {
      channel.close();
      await pool.close();
    },
  };
}

/** An import's body goes on to `serve db` as it arrives. */
async function forwardUpload(pool: Pool, token: string, req: DbRequest): Promise<DbResponse> {
  const { stream, query, contentType } = req.upload!;
  const headers: Record<string, string> = { 'x-scopebase-org': req.org, [PROXY_TOKEN_HEADER]: token, 'x-request-id': req.requestId };
  if (contentType !== undefined) headers['content-type'] = contentType;
  if (req.authorization !== undefined) headers.authorization = req.authorization;
  try {
    const res = await pool.request({ method: 'POST', path: `/${req.repo}/_db/import${query ? `?${query}` : ''}`, headers, body: stream });
    return { status: res.statusCode, headers: passedOn(res.headers), body: await res.body.text() };
  } catch (e) {
    throw remoteFailure(e);
  }
}

function passedOn(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of PASSED_ON) {
    const v = headers[name];
    if (typeof v === 'string') out[name] = v;
  }
  return out;
}

/** One request through undici's dispatcher API, the reply collected into one buffer: no stream or promise per reply. */
function dispatchBuffered(pool: Pool, options: Dispatcher.DispatchOptions): Promise<DbResponse> {
  return new Promise((resolve, reject) => {
    let status = 0;
    let headers: Record<string, string> = {};
    const chunks: Buffer[] = [];
    pool.dispatch(options, {
      onRequestStart() {},
      onResponseStart(_controller, statusCode, responseHeaders) {
        status = statusCode;
        headers = passedOn(responseHeaders);
      },
      onResponseData(_controller, chunk) {
        chunks.push(chunk);
      },
      onResponseEnd() {
        resolve({ status, headers, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
      },
      onResponseError(_controller, err) {
        reject(remoteFailure(err));
      },
    });
  });
}
