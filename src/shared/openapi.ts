// The OpenAPI 3.1 document of every public HTTP endpoint (SPEC 4, 7, 8, 9), served at /_scopebase/openapi.json on
// every org host and on the admin port. Each path item names the Fastify route that serves it (`x-scopebase-route`):
// test/openapi.test.ts checks the document against the live route tables, none missing and none extra.

import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Op } from './db-ops.ts';
import { ApiError } from './errors.ts';
import { productVersion } from './version.ts';

export const OPENAPI_PATH = '/_scopebase/openapi.json';
/** The product's own paths on every org host and the admin port: no repo is named `_scopebase` (SPEC 2). */
const OWN_PREFIX = '/_scopebase';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete' | 'options' | 'trace';
type Operation = Record<string, unknown>;
type PathItem = Record<string, unknown>;

const ERROR = { $ref: '#/components/responses/Error' };
const JSON_OBJECT = { 'application/json': { schema: { type: 'object' } } };
const HTML = { 'text/html': { schema: { type: 'string' } } };
/** What `app.all` catch-alls answer for the methods OpenAPI can name (HEAD is Fastify's automatic twin of GET). */
const EVERY_METHOD: Method[] = ['get', 'post', 'put', 'patch', 'delete', 'options', 'trace'];

function op(summary: string, extra: Operation = {}): Operation {
  return { summary, responses: { 200: { description: 'OK', content: JSON_OBJECT }, default: ERROR }, ...extra };
}

function dbOp(name: string, summary: string): Operation {
  return op(summary, { operationId: `db_${name}`, tags: ['database'], security: [{ repoSecret: [] }], requestBody: { content: JSON_OBJECT } });
}

/** An error-only answer: a method or path the product refuses in SPEC 3's shape. */
function refused(summary: string): Operation {
  return { summary, responses: { default: ERROR } };
}

function item(route: string, params: string[], ops: Partial<Record<Method, Operation>>): PathItem {
  return { 'x-scopebase-route': route, parameters: params.map((name) => ({ $ref: `#/components/parameters/${name}` })), ...ops };
}

/** Every JSON operation, each with its summary (typed by Op, so a new operation cannot go undocumented). */
const SUMMARIES: Record<Op, string> = {
  query: 'Reads (SPEC 4.3): one snapshot for every statement',
  execute: 'Writes as one transaction (SPEC 4.4)',
  migrate: 'Applies migrations once each, in order (SPEC 4.6)',
  status: 'Version, size, tables, migrations, mirrors, databases (SPEC 4.7)',
  snapshot: 'A consistent copy for mirrors (SPEC 4.9)',
  changes: 'The change log after a version, for mirrors (SPEC 4.9)',
  restore: 'Brings a database back to a version or a time (SPEC 4.11)',
  export: 'The database as a SQLite file or SQL text (SPEC 4.12)',
};
const DB_OPS = Object.entries(SUMMARIES);

const dbOpItem = item('/:repo/_db/:op', ['repo', 'op'], {
  get: op('libSQL version probe (`v2`, `v3`); any other op is 404', { tags: ['database'] }),
  post: {
    ...dbOp('op', 'One database operation; the paths below name each'),
    parameters: [{ name: 'op', in: 'path', required: true, schema: { enum: DB_OPS.map(([n]) => n).concat(['v2', 'v3']) } }],
  },
  put: refused('404: database operations take POST'),
  patch: refused('404: database operations take POST'),
  delete: refused('404: database operations take POST'),
  options: refused('404: database operations take POST'),
});

const NO_OWN_ROUTE = '404: the product\'s own paths; the one served is GET /_scopebase/openapi.json';

const paths: Record<string, PathItem> = {
  [OPENAPI_PATH]: item(OPENAPI_PATH, [], {
    get: op('This document (also on the admin port)', { tags: ['meta'] }),
    ...Object.fromEntries(EVERY_METHOD.filter((m) => m !== 'get').map((m) => [m, { ...refused('404: this document takes GET (or HEAD)'), tags: ['meta'] }])),
  }),
  [OWN_PREFIX]: item(OWN_PREFIX, [], Object.fromEntries(EVERY_METHOD.map((m) => [m, { ...refused(NO_OWN_ROUTE), tags: ['meta'] }]))),
  [`${OWN_PREFIX}/{path}`]: item(`${OWN_PREFIX}/*`, ['path'], Object.fromEntries(EVERY_METHOD.map((m) => [m, { ...refused(NO_OWN_ROUTE), tags: ['meta'] }]))),
  '/{repo}/_db/{op}': dbOpItem,
  ...Object.fromEntries(DB_OPS.map(([name, summary]) => [`/{repo}/_db/${name}`, item('/:repo/_db/:op', ['repo'], { post: dbOp(name, summary) })])),
  '/{repo}/_db/import': item('/:repo/_db/import', ['repo'], {
    post: { ...dbOp('import', 'Creates or replaces a database from a SQLite file, streamed (SPEC 4.12)'), requestBody: { content: { 'application/vnd.sqlite3': { schema: { type: 'string', format: 'binary' } } } } },
  }),
  '/{repo}/_db/{database}/v2/pipeline': item('/:repo/_db/*', ['repo', 'database'], {
    get: op('libSQL version probe under a database path', { tags: ['database'] }),
    post: dbOp('pipeline', 'The libSQL remote protocol (Hrana over HTTP, SPEC 4.10); also /_db/v2/pipeline and v3'),
    put: refused('404: the libSQL protocol takes POST'),
    patch: refused('404: the libSQL protocol takes POST'),
    delete: refused('404: the libSQL protocol takes POST'),
    options: refused('404: the libSQL protocol takes POST'),
  }),
  '/{repo}/_account/': item('/:repo/_account', ['repo'], { get: op('The account page (HTML): who is signed in, sign out, plugin credentials; `?signed_out=1` confirms a sign-out', { tags: ['account'], parameters: [{ name: 'signed_out', in: 'query', schema: { const: '1' } }], responses: { 200: { description: 'page', content: HTML } } }) }),
  '/{repo}/_account/login': item('/:repo/_account/login', ['repo'], {
    get: op('Starts sign-in (SPEC 7): 302 to the provider, or a chooser page', { tags: ['account'], parameters: [{ name: 'return_to', in: 'query', schema: { type: 'string' } }, { name: 'provider', in: 'query', schema: { type: 'string' } }], responses: { 302: { description: 'to the provider' }, default: ERROR } }),
  }),
  '/{repo}/_account/callback': item('/:repo/_account/callback', ['repo'], { get: op('The provider returns here: session cookie, 302 to return_to', { tags: ['account'], responses: { 302: { description: 'signed in' }, default: ERROR } }) }),
  '/{repo}/_account/verify': item('/:repo/_account/verify', ['repo'], { get: op('Forward auth: 200 with x-auth-user-* headers, or 401', { tags: ['account'] }) }),
  '/{repo}/_account/logout': item('/:repo/_account/logout', ['repo'], {
    post: op('Signs out: 204, or 303 for a form post', { tags: ['account'], responses: { 204: { description: 'signed out' }, 303: { description: 'to return_to' }, default: ERROR } }),
    get: op('Signs no one out (a link or a prefetch must not): 404 saying that signing out is a POST, and where the button is', { tags: ['account'], responses: { default: ERROR } }),
  }),
  '/{repo}/_account/credentials': item('/:repo/_account/credentials', ['repo'], { get: op('The signed-in user\'s plugin credentials for this repo, without values (SPEC 7.1)', { tags: ['credentials'], security: [{ session: [] }] }) }),
  '/{repo}/_account/credentials/form': item('/:repo/_account/credentials/form', ['repo'], { post: op('The account page\'s form: save a credential (303 back)', { tags: ['credentials'], security: [{ session: [] }] }) }),
  '/{repo}/_account/credentials/{plugin}/{name}': item('/:repo/_account/credentials/:plugin/:name', ['repo', 'plugin', 'name'], {
    get: op('One credential with its value (the signed-in user\'s)', { tags: ['credentials'], security: [{ session: [] }] }),
    put: op('Saves a credential', { tags: ['credentials'], security: [{ session: [] }], requestBody: { content: JSON_OBJECT } }),
    post: op('The account page\'s form for this credential (save or delete, 303 back)', { tags: ['credentials'], security: [{ session: [] }] }),
    delete: op('Deletes a credential', { tags: ['credentials'], security: [{ session: [] }] }),
  }),
  '/{repo}/_account/credentials/{plugin}/{name}/{more}': item('/:repo/_account/credentials/*', ['repo', 'plugin', 'name', 'more'], Object.fromEntries(EVERY_METHOD.map((m) => [m, refused('400 invalid_name or 404: names have no "/", and only the methods above are served')]))),
  '/{repo}': item('/:repo', ['repo'], Object.fromEntries(EVERY_METHOD.map((m) => [m, refused('The repo\'s app (SPEC 8); without one, a browser GET gets the landing page and anything else 404')]))),
  '/{repo}/{path}': item('/:repo/*', ['repo', 'path'], Object.fromEntries(EVERY_METHOD.map((m) => [m, refused('Streamed to the repo\'s app (APPS, SPEC 8), /{repo} stripped; requireSession redirects to sign-in; 404 with no app')]))),
};

/** The admin port's endpoints (SPEC 9), on their own server. */
const ADMIN_SERVER = [{ url: 'http://127.0.0.1:9090', description: 'ADMIN_PORT (keep it private)' }];
const adminPathsAt = (servers: { url: string; description: string }[]): Record<string, PathItem> => ({
  '/healthz': { ...item('/healthz', [], { get: op('Liveness', { tags: ['admin'] }) }), servers },
  '/readyz': { ...item('/readyz', [], { get: op('Readiness: 503 while starting or draining', { tags: ['admin'] }) }), servers },
  '/metrics': { ...item('/metrics', [], { get: op('Prometheus metrics (docs/deploy.md, Monitoring)', { tags: ['admin'], responses: { 200: { description: 'text', content: { 'text/plain': { schema: { type: 'string' } } } } } }) }), servers },
});
const adminPaths = adminPathsAt(ADMIN_SERVER);

/**
 * Serves this document at OPENAPI_PATH, and answers anything else under /_scopebase in SPEC 3's shape on the headers,
 * before a body is read: another method on the document is 404 saying it takes GET (as /_db says "takes POST"),
 * another path 404 no route. Before, the proxy took `_scopebase` for a repo name: 400 invalid_name.
 */
export function registerOwnPaths(app: FastifyInstance, servedAt: (req: FastifyRequest) => ServedAt): void {
  app.get(OPENAPI_PATH, async (req, reply) => reply.type('application/json; charset=utf-8').send(openApiJson(servedAt(req))));
  const refuse = async (req: FastifyRequest): Promise<void> => {
    const rest = (req.params as { '*'?: string })['*'];
    if (req.routeOptions.url === OPENAPI_PATH || `${OWN_PREFIX}/${rest}` === OPENAPI_PATH) {
      throw new ApiError('not_found', `${OPENAPI_PATH} takes GET (or HEAD), not ${req.method.slice(0, 20)}`, undefined, { allow: 'GET, HEAD' });
    }
    throw new ApiError('not_found', `no route for ${req.method.slice(0, 20)} ${req.url.split('?')[0]!.slice(0, 200)}: the product's own paths are under ${OWN_PREFIX}/, and the one served is GET ${OPENAPI_PATH}`);
  };
  const never = async (): Promise<void> => {}; // each request was refused in onRequest
  app.route({ method: EVERY_METHOD.filter((m) => m !== 'get').map((m) => m.toUpperCase()), url: OPENAPI_PATH, onRequest: refuse, handler: never });
  app.all(OWN_PREFIX, { onRequest: refuse }, never);
  app.all(`${OWN_PREFIX}/*`, { onRequest: refuse }, never);
}

let built: Record<string, unknown> | null = null;

/** Where the asker reached this instance: the org host's scheme, domain and port, or the admin port's address. */
export interface ServedAt { scheme?: string; org?: string; hostAfterOrg?: string; admin?: string }

/**
 * The document as served: built once (it only changes with the code), its servers those of the request, since a fixed
 * `http://{org}.localhost:8080` sent every client generated from it, or "Try it out", elsewhere than this instance.
 */
export function openApiJson(at: ServedAt = {}): string {
  built ??= openApiDocument();
  const servers = at.hostAfterOrg ? orgServers(at.scheme ?? 'http', at.hostAfterOrg, at.org ?? 'acme') : built.servers;
  const paths = at.admin ? { ...(built.paths as object), ...adminPathsAt([{ url: at.admin, description: ADMIN_SERVER[0]!.description }]) } : built.paths;
  return JSON.stringify({ ...built, servers, paths });
}

const orgServers = (scheme: string, hostAfterOrg: string, org: string) => [{ url: `${scheme}://{org}.${hostAfterOrg}`, description: 'an org host: {org}.{BASE_DOMAIN}', variables: { org: { default: org } } }];

export function openApiDocument(version = productVersion()): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: { title: 'scopebase', version, description: 'A SQLite database and OAuth sign-in for every repository. Errors always have SPEC 3\'s shape (JSON; an HTML page for browsers outside /_db).' },
    servers: orgServers('http', 'localhost:8080', 'acme'),
    paths: { ...paths, ...adminPaths },
    components: {
      parameters: {
        repo: { name: 'repo', in: 'path', required: true, schema: { type: 'string', pattern: '^[a-z0-9][a-z0-9._-]{0,99}$' } },
        op: { name: 'op', in: 'path', required: true, schema: { type: 'string' } },
        database: { name: 'database', in: 'path', required: true, schema: { type: 'string' } },
        plugin: { name: 'plugin', in: 'path', required: true, schema: { type: 'string' } },
        name: { name: 'name', in: 'path', required: true, schema: { type: 'string' } },
        more: { name: 'more', in: 'path', required: true, schema: { type: 'string' }, description: 'anything further (refused)' },
        path: { name: 'path', in: 'path', required: true, schema: { type: 'string' }, description: 'the rest of the path, slashes included' },
      },
      securitySchemes: {
        repoSecret: { type: 'http', scheme: 'bearer', description: 'the repo\'s shared secret (`scopebase secret org/repo`)' },
        session: { type: 'apiKey', in: 'cookie', name: 'session', description: 'a signed-in session (`__Host-session` over HTTPS)' },
      },
      responses: {
        Error: {
          description: 'SPEC 3\'s error shape',
          content: { 'application/json': { schema: { type: 'object', required: ['error'], properties: { error: { type: 'object', required: ['code', 'message'], properties: { code: { type: 'string' }, message: { type: 'string' }, details: { type: 'object' } } } } } } },
        },
      },
    },
  };
}
