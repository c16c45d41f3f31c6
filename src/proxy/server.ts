// The runtime proxy: resolves the org from Host, checks names, and routes /{repo}/_db, /{repo}/_account and apps.
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { Readable } from 'node:stream';
import { registerImportRoute } from '../db/import.ts';
import { ApiError } from '../shared/errors.ts';
import type { ConnectionCap } from '../shared/connection-cap.ts';
import { createHttpApp } from '../shared/http.ts';
import type { RawRoute } from '../shared/raw-route.ts';
import { admitDbHeaders, isDbOperation, unknownOperation } from '../db/admit.ts';
import { registerOwnPaths } from '../shared/openapi.ts';
import type { Logger } from '../shared/log.ts';
import { checkRepo, lowerAscii } from '../shared/names.ts';
import type { DbHandler } from '../db/contract.ts';
import { pipelineDatabase, probeDatabase } from '../db/hrana/index.ts';
import { orgFromHost } from '../shared/host.ts';
import { stripSpoofableHeaders } from '../shared/headers.ts';
import { sessionView } from './forward.ts';
import { trustedPeers } from '../shared/trusted-peers.ts';
import type { AccountForProxy } from './account-wiring.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The organization, resolved from Host by the proxy (or from trusted headers by a standalone service). */
    org: string;
    /** The repo secret was checked on the headers and is right (admit.ts): the service does not check it again. */
    secretChecked: boolean;
  }
}

export interface ProxyOptions {
  logger: Logger;
  baseDomain: string;
  bodyLimit: number;
  /** RUNTIME_ROOT_KEY: repo secrets are checked here, before a body is read (the service checks them again behind a hop). */
  rootKeys: Buffer[];
  trustedProxies: string[];
  db: DbHandler;
  /** The account service, mounted at /{repo}/_account (in-process or a forwarder to its own process). */
  account?: FastifyPluginAsync;
  /** App routes for other /{repo}/* paths; registered as a plugin so it owns its own hooks. */
  apps?: FastifyPluginAsync;
  /** The in-process account service's GET /verify, served on the raw path (else the account plugin answers it). */
  verify?: AccountForProxy['verify'];
  connections: ConnectionCap;
}

type DbRequestOf = FastifyRequest<{ Params: { repo: string; op?: string; '*'?: string } }>;

/** The operation a Fastify /_db route names: `:op`, or the libSQL protocol's deeper path (`v2/pipeline`, `{database}/v3`). */
const opOf = (req: DbRequestOf): string => req.params.op ?? req.params['*'] ?? '';

/** The shapes the raw routes take: a plain repo segment, no query string or escapes (the rest goes to Fastify). */
const DB_PATH = /^\/([^/?%#]+)\/_db\/([^/?%#]+|(?:[^/?%#]+\/)?v[23]\/pipeline)$/;
const VERIFY_PATH = /^\/([^/?%#]+)\/_account\/verify$/;
/** The product's own routes under a repo: the account service and the database service. */
const SERVICE_PATH = /^\/[^/?#]+\/(_account|_db)(\/|\?|$)/;

export async function createProxy(opts: ProxyOptions): Promise<FastifyInstance> {
  // POST /{repo}/_db/{op} is the hot path: served off node:http, with the same answers as the Fastify route below.
  // The host, names and secret are checked on the headers, before any of the body is read (admit.ts).
  const rawDbRoute: RawRoute<{ org: string; repo: string; op: string; authenticated: boolean }> = {
    admit: (req) => {
      const [, rawRepo, op] = DB_PATH.exec(req.url!)!;
      const org = orgFromHost(req.headers.host, opts.baseDomain);
      const repo = checkRepo(rawRepo!);
      const authenticated = admitDbHeaders(req, opts.rootKeys, org, repo, op!);
      return { org, repo, op: op!, authenticated };
    },
    handle: async (req, body, requestId, { org, repo, op, authenticated }) => opts.db.handle({ op, org, repo, authorization: req.headers.authorization, authenticated, body, requestId }),
  };
  // GET /{repo}/_account/verify is forward auth's check, on every request of a protected app: raw too when in-process.
  const isTrusted = trustedPeers(opts.trustedProxies);
  const verify = opts.verify;
  const rawVerifyRoute: RawRoute<{ org: string }> = {
    bodyless: true,
    admit: (req) => {
      const [, repo] = VERIFY_PATH.exec(req.url!)!;
      const org = orgFromHost(req.headers.host, opts.baseDomain);
      checkRepo(repo!);
      return { org };
    },
    handle: async (req, _body, _requestId, { org }) => verify!(sessionView(req, org, isTrusted(req.socket.remoteAddress))),
  };
  const app = createHttpApp({
    logger: opts.logger, bodyLimit: opts.bodyLimit, trustProxy: opts.trustedProxies.length ? opts.trustedProxies : false, connections: opts.connections,
    // Only apps take WebSockets: an upgrade to the product's own routes is answered as the plain request it also is
    // (nginx and Traefik pass a WebSocket's Upgrade to forward auth's GET /verify, which got 404 as an upgrade).
    shouldUpgrade: (req) => !SERVICE_PATH.test(req.url ?? '/'),
    rawRoutes: (req) => {
      if (req.method === 'POST') return DB_PATH.test(req.url!) && !req.url!.endsWith('/_db/import') ? rawDbRoute as RawRoute : null;
      return verify && req.method === 'GET' && VERIFY_PATH.test(req.url!) ? rawVerifyRoute as RawRoute : null;
    },
  });
  app.decorateRequest('org', '');
  app.decorateRequest('secretChecked', false);
  app.addHook('onRequest', async (req) => {
    req.secretChecked = false;
    stripSpoofableHeaders(req.headers);
    req.org = orgFromHost(req.headers.host, opts.baseDomain);
  });

  // The other /_db shapes (a query string, `%` escapes, the libSQL protocol's deeper paths, other methods): Fastify.
  // As on the raw route, what the request line and headers decide is decided before Fastify reads the body.
  const admitDbRoute = async (req: DbRequestOf) => {
    const op = opOf(req);
    const repo = checkRepo(req.params.repo);
    if (req.params.op === undefined && probeDatabase(op) === null && pipelineDatabase(op) === null) {
      throw new ApiError('not_found', `no route /_db/${op.slice(0, 60)}: the libSQL protocol is at /_db/v2/pipeline (or /_db/{database}/v2/pipeline)`);
    }
    // SPEC 4.10's version probe (GET …/_db/v2): libSQL clients ask it before they speak, without a secret.
    if (req.method === 'GET' && probeDatabase(op) !== null) return;
    if (req.method !== 'POST' && !isDbOperation(op)) throw unknownOperation(op);
    if (req.method !== 'POST') throw new ApiError('not_found', `/_db/${op.slice(0, 40)} takes POST`);
    // `?database=x` read as nothing would run the request on main: refused, not ignored (import alone takes a query).
    if (req.url.includes('?') && pipelineDatabase(op) === null) throw new ApiError('invalid_request', `/_db/${op.slice(0, 40)} reads no query string: send "database" and the rest in the JSON body (SPEC 4)`);
    // A pipeline's other query parameters are a client's to add, but `?database=` ran on main, as the path names none.
    if (pipelineDatabase(op) !== null && new URLSearchParams(req.url.split('?')[1] ?? '').has('database')) {
      throw new ApiError('invalid_request', `the libSQL protocol names its database in the path, not in ?database=: /_db/{database}/${op.replace(/^.*?(v[23]\/\w+)$/, '$1')} (SPEC 4.10)`);
    }
    req.secretChecked = admitDbHeaders(req.raw, opts.rootKeys, req.org, repo, op);
  };
  const dbRoute = async (req: DbRequestOf, reply: FastifyReply) => {
    if (req.method === 'GET') return reply.type('application/json; charset=utf-8').send('{}'); // a version probe (admitted above)
    const res = await opts.db.handle({
      op: opOf(req), org: req.org, repo: checkRepo(req.params.repo), authorization: req.headers.authorization, authenticated: req.secretChecked,
      body: Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0), requestId: req.id,
    });
    reply.code(res.status);
    if (res.headers) reply.headers(res.headers);
    if (res.body instanceof Readable) return reply.send(res.body);
    return reply.type('application/json; charset=utf-8').send(res.body);
  };
  app.route({ method: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'], url: '/:repo/_db/:op', onRequest: admitDbRoute, handler: dbRoute });
  // SPEC 4.12: an import's body is a database file, streamed to the service as it arrives.
  await registerImportRoute(app, (req, upload) => opts.db.handle({
    op: 'import', org: req.org, repo: checkRepo((req.params as { repo: string }).repo), authorization: req.headers.authorization, body: Buffer.alloc(0), requestId: req.id, upload,
  }));
  // SPEC 4.10: the libSQL protocol's deeper paths. Version probes are answered here; pipelines go to the service.
  app.route({ method: ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'], url: '/:repo/_db/*', onRequest: admitDbRoute, handler: dbRoute });

  registerOwnPaths(app, (req) => {
    const after = lowerAscii(req.headers.host ?? '').slice(req.org.length + 1); // Host was checked: {org}.{BASE_DOMAIN}[:port]
    return /^[a-z0-9.-]+(:\d+)?$/.test(after) ? { scheme: req.protocol, org: req.org, hostAfterOrg: after } : {};
  });
  if (opts.account) await app.register(opts.account, { prefix: '/:repo/_account' });
  if (opts.apps) await app.register(opts.apps);
  return app;
}

