// The Fastify foundation every listener shares: request ids, raw bodies, and SPEC 3's error shape for every failure.
import { isUtf8 } from 'node:buffer';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import { sendErrorPage, wantsHtml } from './html-page.ts';
import { ApiError, isDiskFull } from './errors.ts';
import type { Logger } from './log.ts';
import { logAccess, requestIdOf, serveRaw, type RawRouter } from './raw-route.ts';
import { answerClientError, answerConnect, limitSlowClients, TIMEOUT_CHECK_MS } from './client-errors.ts';
import { refuseUpgrade, type ConnectionCap } from './connection-cap.ts';
import { LIBSQL_ERROR_TYPE, libsqlErrorBody } from './libsql-errors.ts';
import { answeredBeforeBody, collectBody } from './body-budget.ts';

export interface HttpOptions {
  logger: Logger;
  bodyLimit: number;
  /** Trust X-Forwarded-For from these addresses when computing request.ip. */
  trustProxy?: string[] | boolean;
  /** Rewrites a request's URL before routing (the standalone account service maps `/X` to `/{repo}/_account/X`). */
  rewriteUrl?: (req: IncomingMessage) => string;
  /** Hot routes served straight off node:http ahead of Fastify (raw-route.ts). */
  rawRoutes?: RawRouter;
  /** The connection cap this listener counts against (one per product for the public listeners, its own for admin). */
  connections: ConnectionCap;
  /** Which requests with `Upgrade` go to the server's 'upgrade' listeners; the rest are answered as plain requests. */
  shouldUpgrade?: (req: IncomingMessage) => boolean;
  /** Headers every answer of the server carries, those made before any route included (the account service's mark). */
  answerHeaders?: (req: IncomingMessage) => Record<string, string>;
}

const routeTables = new WeakMap<FastifyInstance, Set<string>>();

/** Every route a server registered, as `METHOD /template` (the OpenAPI test compares the document with it). */
export function routeTable(app: FastifyInstance): string[] {
  return [...(routeTables.get(app) ?? [])].sort();
}

// Fastify's defaults for the servers it makes itself; ours (serverFactory) keep them.
const KEEP_ALIVE_TIMEOUT_MS = 72_000;

export function createHttpApp(opts: HttpOptions): FastifyInstance {
  let closing = false;
  /** The response of each request with a body that Fastify serves: its bodies in flight are given back when it closes. */
  const responses = new WeakMap<IncomingMessage, ServerResponse>();
  const rawApiError = (err: unknown, reqId: string) => {
    const e = toApiError(err);
    if (e.code === 'internal') opts.logger.error({ err, reqId }, 'unhandled error');
    return e;
  };
  const app = Fastify({
    loggerInstance: opts.logger,
    // Fastify's two lines per request are replaced by our one access line (onResponse below).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: opts.bodyLimit,
    trustProxy: opts.trustProxy ?? false,
    requestIdHeader: false,
    genReqId: requestIdOf,
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: 500 },
    return503OnClosing: true,
    clientErrorHandler: answerClientError,
    // Errors Fastify meets before any route (an undecodable URL such as /web%FF/…): SPEC 3's shape too.
    frameworkErrors: (err, req, reply) => {
      reply.header('x-request-id', req.id);
      sendError(reply, new ApiError('invalid_request', err.code === 'FST_ERR_BAD_URL' ? 'the URL is not valid percent-encoded UTF-8' : err.message.slice(0, 200)));
    },
    forceCloseConnections: 'idle',
    rewriteUrl: opts.rewriteUrl as never, // typed loosely: its `this` type would otherwise pin the logger generic
    serverFactory: (fastifyHandler) => {
      const serving = { logger: opts.logger, bodyLimit: opts.bodyLimit, closing: () => closing, toApiError: rawApiError };
      // A missing Host is the routes' to answer (unknown_host), in SPEC 3's shape, not Node's empty 400.
      const upgrades = opts.shouldUpgrade;
      const server: Server = createServer({
        requireHostHeader: false, connectionsCheckingInterval: TIMEOUT_CHECK_MS,
        ...(upgrades ? { shouldUpgradeCallback: (req: IncomingMessage): boolean => server.listenerCount('upgrade') > 0 && upgrades(req) } : {}),
      }, (req, res) => {
        // Set first: the connection cap's 503 and a shutting-down 503 are the server's own answers too.
        if (opts.answerHeaders) for (const [name, value] of Object.entries(opts.answerHeaders(req))) res.setHeader(name, value);
        if (!opts.connections.admit(req, res)) return; // a connection over a cap: answered 503
        if (serveRaw(opts.rawRoutes, serving, req, res)) return;
        if (req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined) responses.set(req, res);
        fastifyHandler(req, res);
      });
      server.on('connect', (req: IncomingMessage, socket: Duplex) => {
        if (!refuseUpgrade(req, socket)) logAccess(opts.logger, requestIdOf(req), req.method, req.url, answerConnect(req, socket), 0);
      });
      // An Expect other than 100-continue: Node's own 417 had no body and no x-request-id.
      server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
        const id = requestIdOf(req);
        const body = JSON.stringify(new ApiError('invalid_request', `Expect: ${JSON.stringify(String(req.headers.expect).slice(0, 60))} cannot be met: the only expectation served is 100-continue`).toBody());
        res.writeHead(417, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body), 'x-request-id': id, connection: 'close' }).end(body);
        logAccess(opts.logger, id, req.method, req.url, 417, 0);
      });
      server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
      limitSlowClients(server);
      opts.connections.watch(server);
      return server;
    },
  }) as unknown as FastifyInstance;
  app.addHook('preClose', async () => {
    closing = true;
    // A request in flight when the drain began would leave its connection kept alive for KEEP_ALIVE_TIMEOUT_MS after
    // its answer, and the drain waited SHUTDOWN_TIMEOUT_MS for it: from now on an answered connection is let go at once.
    app.server.keepAliveTimeout = 1;
  });
  // Bodies stay raw: each service parses what it expects (curl -d sends form-urlencoded JSON). They are collected
  // against the route's body limit and the process's budget of bodies in flight (body-budget.ts), as on the raw routes.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (req, payload, done) => {
    const res = responses.get(req.raw);
    if (res === undefined) return done(null, Buffer.alloc(0)); // no Content-Length or Transfer-Encoding: no body
    // req.ip: the client a TRUSTED_PROXIES peer named, else the peer: whose share the body counts in, if not a repo's.
    collectBody(req.raw, res, req.routeOptions.bodyLimit ?? opts.bodyLimit, (body) => (body instanceof ApiError ? done(body) : done(null, body)), req.ip);
  });

  const table = new Set<string>();
  routeTables.set(app, table);
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) table.add(`${method} ${route.url}`);
  });
  app.addHook('onRequest', async (req, reply) => {
    reply.header('x-request-id', req.id);
  });
  app.addHook('onResponse', async (req, reply) => {
    logAccess(opts.logger, req.id, req.method, req.url, reply.statusCode, reply.elapsedTime);
  });
  app.addHook('onSend', async (req, reply, payload) => {
    const libsql = libsqlErrorBody(reply.statusCode, req.url, payload);
    if (libsql === null) return payload;
    reply.type(LIBSQL_ERROR_TYPE);
    return libsql;
  });
  // An error answered while a large body is still unread (a hook refused it, its host or names are wrong): the
  // connection closes after the answer rather than wait for, or read, the rest.
  app.setErrorHandler((err, req, reply) => answerError(req, reply, req.raw.complete ? toApiError(err, req) : answeredBeforeBody(req.raw, toApiError(err, req))));
  app.setNotFoundHandler((req, reply) => answerError(req, reply, new ApiError('not_found', `no route for ${req.method} ${req.url.split('?')[0]!.slice(0, 200)}`)));
  return app;
}

/** Maps anything thrown in a handler to the SPEC shape; unexpected errors are logged and answered without detail. */
export function toApiError(err: unknown, req?: FastifyRequest): ApiError {
  if (err instanceof ApiError) return err;
  const e = err as { statusCode?: number; code?: string; message?: string };
  if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return new ApiError('payload_too_large', 'request body is over the size limit');
  if (e.statusCode === 503) return new ApiError('unavailable', 'the server is shutting down', undefined, { 'retry-after': '1' });
  // A full disk under the account store or any file this service writes: 507, as SPEC 3 says, not a 500.
  if (isDiskFull(err)) return new ApiError('quota_exceeded', 'the server\'s disk is full; retry once its operator has freed space');
  if (typeof e.statusCode === 'number' && e.statusCode >= 400 && e.statusCode < 500) {
    if (e.statusCode === 404) return new ApiError('not_found', 'not found');
    return new ApiError('invalid_request', e.message?.slice(0, 200) ?? 'invalid request');
  }
  req?.log.error({ err }, 'unhandled error');
  return new ApiError('internal', 'internal error');
}

/** A person's browser gets the error as a page; API clients keep SPEC 3's JSON. */
export function answerError(req: FastifyRequest, reply: FastifyReply, err: ApiError): FastifyReply {
  // The database API answers JSON whatever the Accept (libSQL clients and fetch may ask for anything).
  if (!wantsHtml(req) || /^\/[^/?]+\/_db(\/|\?|$)/.test(req.url)) return sendError(reply, err);
  if (err.headers) reply.headers(err.headers);
  return sendErrorPage(req, reply, err.status, err.code, err.message);
}

export function sendError(reply: FastifyReply, err: ApiError): FastifyReply {
  if (err.headers) reply.headers(err.headers);
  return reply.code(err.status).type('application/json; charset=utf-8').send(JSON.stringify(err.toBody()));
}

/** Parses a JSON request body into a plain object, or throws invalid_request. */
export function parseJsonObject(body: unknown): Record<string, unknown> {
  if (!Buffer.isBuffer(body) || body.length === 0) throw new ApiError('invalid_request', 'the request body must be a JSON object');
  // Not valid UTF-8: decoding would put U+FFFD in place of what the caller sent, and store that silently.
  if (!isUtf8(body)) throw new ApiError('invalid_request', 'the request body is not valid UTF-8');
  const text = body.toString('utf8');
  const shape = jsonTooComplex(text);
  if (shape === 'deep') throw new ApiError('invalid_request', `the JSON body nests deeper than ${MAX_JSON_DEPTH} levels`);
  if (shape === 'many') throw new ApiError('payload_too_large', `the JSON body holds more than ${MAX_JSON_CONTAINERS.toLocaleString('en-US')} objects and arrays; send it in parts`);
  if (shape === 'named') throw new ApiError('payload_too_large', `the JSON body's objects use more than ${MAX_JSON_NAMES.toLocaleString('en-US')} different names and hold more than ${MAX_JSON_NAMED_ITEMS.toLocaleString('en-US')} objects, arrays and members in all; send it in parts`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw malformedJson();
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ApiError('invalid_request', 'the request body must be a JSON object');
  if (SURROGATE_ESCAPE.test(text) && hasLoneSurrogate(value)) {
    throw new ApiError('invalid_request', 'a string in the JSON body holds a lone UTF-16 surrogate (a \\uD800–\\uDFFF escape without its pair): it is no character, and UTF-8 cannot store it; send the whole character');
  }
  return value as Record<string, unknown>;
}

/** Only a \\u escape can make a lone surrogate (valid UTF-8 cannot): the walk below runs only when one is there. */
const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

function hasLoneSurrogate(root: object): boolean {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value === 'string') {
      if (!value.isWellFormed()) return true;
    } else if (typeof value === 'object' && value !== null) {
      for (const [key, child] of Array.isArray(value) ? value.entries() : Object.entries(value)) {
        if (typeof key === 'string' && !key.isWellFormed()) return true;
        stack.push(child);
      }
    }
  }
  return false;
}

/** How deep a request's JSON may nest: deeper values would overflow the stack of whatever walks them later. */
export const MAX_JSON_DEPTH = 64;

/**
 * Objects and arrays one JSON body may hold. A 32 MB libSQL batch of null arguments holds 2 million and parses in about
 * 0.2 s; 10 million `{}` in 30 MB held every org's requests 2.3-3 s in JSON.parse (GC of small objects, superlinear).
 */
export const MAX_JSON_CONTAINERS = 2_000_000;

/**
 * Names of object members past which a body may hold only MAX_JSON_NAMED_ITEMS objects, arrays and members. JSON.parse
 * of objects whose names vary costs V8 a new shape each: 1.9 million named params in one object (29 MB) or 950,000
 * objects with a name of their own held every org's requests 3-5 s (attack round 11). A client's bodies use a few
 * names (Hrana's `type`, `value`; a table's columns) many times, or many names (SQLite binds at most 32,766) once.
 */
export const MAX_JSON_NAMES = 1_000;
export const MAX_JSON_NAMED_ITEMS = 100_000;

/**
 * What makes a JSON text too costly to parse, read before JSON.parse on the loop every org shares: nesting deeper
 * than MAX_JSON_DEPTH ('deep': 16 million `[` held the loop 7 s before a walk refused them), more than
 * MAX_JSON_CONTAINERS objects and arrays ('many'), or more than MAX_JSON_NAMES names with more than
 * MAX_JSON_NAMED_ITEMS objects, arrays and members ('named'). Strings are skipped whole.
 */
export function jsonTooComplex(text: string): 'deep' | 'many' | 'named' | null {
  let depth = 0;
  let containers = 0;
  let members = 0;
  const names = new Set<string>();
  let last = 0; // the last string, from its opening to its closing quote: a `:` follows a member's name
  let lastEnd = 0;
  for (let i = 0, n = text.length; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      last = i;
      i = jsonStringEnd(text, i);
      if (i === -1) return null; // an unterminated string: JSON.parse says it is malformed
      lastEnd = i;
    } else if (c === 91 || c === 123) {
      if (++depth > MAX_JSON_DEPTH) return 'deep';
      if (++containers > MAX_JSON_CONTAINERS) return 'many';
    } else if (c === 93 || c === 125) {
      depth--;
    } else if (c === 58) {
      if (names.size <= MAX_JSON_NAMES) names.add(text.slice(last, lastEnd + 1)); // counted only up to too many
      if (++members + containers > MAX_JSON_NAMED_ITEMS && names.size > MAX_JSON_NAMES) return 'named';
    }
  }
  return null;
}

/** The index of the `"` that closes the JSON string opening at `i`, or -1 when it is not closed. */
export function jsonStringEnd(text: string, i: number): number {
  do i = text.indexOf('"', i + 1); while (i !== -1 && escapedAt(text, i));
  return i;
}

/** Whether the `"` at `i` is escaped: an odd run of `\` before it (each run is read once: the next `"` is past it). */
function escapedAt(text: string, i: number): boolean {
  let k = i;
  while (text.charCodeAt(k - 1) === 92) k--;
  return (i - k) % 2 === 1;
}


/** V8's JSON errors quote the input, which may hold a secret: the message says only what is wrong. */
export function malformedJson(): ApiError {
  return new ApiError('invalid_request', 'malformed JSON: the request body is not valid JSON');
}
