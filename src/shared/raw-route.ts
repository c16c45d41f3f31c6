// Hot routes served straight off node:http, ahead of Fastify (the /{repo}/_db/{op} path: see src/db/DESIGN.md).
// They skip Fastify's routing, hooks, body parser and per-request logger, and keep what callers rely on:
// the request id, the checks on the headers before the body (each route's `admit`), the body limit and the budget of
// bodies in flight (body-budget.ts), SPEC 3's error shape, one access line, and 503 while the server closes.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { Readable, pipeline } from 'node:stream';
import { ApiError } from './errors.ts';
import { describedFault, type Logger } from './log.ts';
import { LIBSQL_ERROR_TYPE, libsqlErrorBody } from './libsql-errors.ts';
import { observeRequest } from './metrics.ts';
import { answeredBeforeBody, collectBody, declaresBody } from './body-budget.ts';

/** Printable ASCII, spaces included (AWS's `Root=1-…;Parent=…`, W3C trace ids), up to 200 characters. */
const REQUEST_ID = /^[\x20-\x7e]{1,200}$/;

/** The caller's x-request-id when it is printable ASCII of a sane length, else a fresh one (shared by Fastify's routes). */
export function requestIdOf(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  if (typeof given !== 'string' || !REQUEST_ID.test(given)) return randomUUID();
  // Two ids are none: Node joins them with ", ". Only then is the distinct list built (every request passes here).
  return !given.includes(', ') || req.headersDistinct?.['x-request-id']?.length === 1 ? given : randomUUID();
}

export interface RawReply {
  status: number;
  headers?: Record<string, string>;
  /** A JSON text, or a stream (snapshots, exports). */
  body: string | Buffer | Readable;
}

/**
 * A hot route. `admit` runs on the request line and headers alone, before any of the body is read (docs/security.md,
 * "Request bodies"): it throws an ApiError to answer at once (the host, names, a wrong secret: `refuseBeforeBody`), else
 * returns what it found (the org, names, whether the caller is authenticated) for `handle`, which gets the body.
 */
export interface RawRoute<A = unknown> {
  /**
   * Takes no body (GET /verify): one sent is never read nor counted in the budget, and the answer closes the
   * connection, so it is not waited for. Read, a body declared on it held the budget of every tenant's bodies.
   */
  bodyless?: boolean;
  admit(req: IncomingMessage): A;
  handle(req: IncomingMessage, body: Buffer, requestId: string, admitted: A): Promise<RawReply>;
}

/** Picks the raw route for a request, or null to leave it to Fastify. Must be cheap: it sees every request. */
export type RawRouter = (req: IncomingMessage) => RawRoute | null;

export interface RawServing {
  logger: Logger;
  bodyLimit: number;
  /** True once the server has begun to close: every new request then gets 503. */
  closing(): boolean;
  /** Maps an unexpected error to the SPEC shape (and logs it). */
  toApiError(err: unknown, requestId: string): ApiError;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const NO_BODY = Buffer.alloc(0);

/** SPEC 3's error shape as a reply (raw routes, the db channel, /verify). */
export function errorReply(err: ApiError): RawReply {
  return { status: err.status, headers: { 'content-type': JSON_TYPE, ...err.headers }, body: JSON.stringify(err.toBody()) };
}

/** One access line per request, for every route: no query string, headers or bodies (they may carry secrets). */
export function logAccess(logger: Logger, reqId: string, method: string | undefined, url: string | undefined, status: number, ms: number, extra?: object): void {
  observeRequest(method, url, status, ms);
  if (!logger.isLevelEnabled('info')) return;
  logger.info({ reqId, method, path: (url ?? '').split('?')[0], status, ms: Math.round(ms * 10) / 10, ...extra }, 'request');
}

/**
 * An absolute-form target split as sent (RFC 9112 3.2.2): `http://host:1/a/%2e%2e/b?q` is the scheme `http`, the
 * authority `host:1` and the path `/a/%2e%2e/b?q`, byte for byte. Null when it is no http(s) URL whose authority is
 * followed by a path, a query or nothing (a `\` there, which URL parsers read as the path's `/`, included).
 */
function splitAbsolute(url: string): { scheme: string; authority: string; path: string } | null {
  const m = /^(https?):\/\/([^/?#\\]*)(.*)$/i.exec(url);
  if (!m || !/^([/?]|$)/.test(m[3]!)) return null;
  return { scheme: m[1]!, authority: m[2]!, path: m[3]!.startsWith('/') ? m[3]! : `/${m[3]!}` };
}

/**
 * Why the request's Host cannot be trusted, or null. RFC 9112 3.2: more than one Host is a 400; so is an absolute-form
 * target whose authority is not the Host (the target wins there, and every part reads the org from Host). A proxy in
 * front that picks another of them than Node (the first) would otherwise route to one org while this serves another.
 */
export function hostConflict(req: IncomingMessage): string | null {
  const raw = req.rawHeaders;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.length === 4 && raw[i]!.toLowerCase() === 'host') hosts++;
  if (hosts > 1) return 'the request has more than one Host header';
  const url = req.url ?? '';
  if (url.startsWith('/') || url === '*') return null;
  const target = splitAbsolute(url);
  if (target === null) return 'the request target is neither a path nor an absolute http(s) URL with a path';
  try {
    // Both through the URL parser, so a default port (`:80`) written on one side only is still the same host.
    const { scheme, authority } = target;
    if (new URL(`${scheme}://${authority}`).host === new URL(`${scheme}://${req.headers.host ?? ''}`).host) return null;
  } catch {
    // either side is no host at all: another host than the Host header's
  }
  return 'the absolute request target names another host than the Host header';
}

/**
 * RFC 9112 3.2.2: a server takes an absolute-form target (a client using it as its HTTP proxy). Once hostConflict
 * passed it, the request goes on as its origin-form path, so every route (apps and pages too) sees the same URL.
 * The path is kept as sent, not normalized: `/web/%2e%2e/other/` stays under repo web as it does in origin form,
 * where a URL parser would have resolved it to /other/ (a path filter in front saw /web/, the proxy served /other/).
 */
export function toOriginForm(req: IncomingMessage): void {
  const url = req.url ?? '';
  if (url.startsWith('/') || url === '*') return;
  req.url = splitAbsolute(url)!.path;
}

/** Answers 503 while closing, else serves the request if `router` takes it; returns false to hand it to Fastify. */
export function serveRaw(router: RawRouter | undefined, serving: RawServing, req: IncomingMessage, res: ServerResponse): boolean {
  if (serving.closing()) {
    // Fastify's own 503 is not SPEC-shaped; and the connection closes so the client reconnects elsewhere.
    sendRaw(res, requestIdOf(req), errorReply(new ApiError('unavailable', 'the server is shutting down', undefined, { 'retry-after': '1', connection: 'close' })));
    return true;
  }
  const conflict = hostConflict(req);
  if (conflict !== null) {
    sendRaw(res, requestIdOf(req), errorReply(new ApiError('invalid_request', conflict, undefined, { connection: 'close' })));
    return true;
  }
  toOriginForm(req);
  const route = router?.(req);
  if (!route) return false;
  const started = performance.now();
  const requestId = requestIdOf(req);
  const unread = route.bodyless === true && declaresBody(req); // its answer closes the connection: never waited for
  const done = (reply: RawReply) => {
    if (unread) reply = { ...reply, headers: { ...reply.headers, connection: 'close' } };
    const libsql = libsqlErrorBody(reply.status, req.url, reply.body);
    if (libsql !== null) reply = { ...reply, headers: { ...reply.headers, 'content-type': LIBSQL_ERROR_TYPE }, body: libsql };
    sendRaw(res, requestId, reply);
    logAccess(serving.logger, requestId, req.method, req.url, reply.status, performance.now() - started);
  };
  const fail = (err: unknown) => done(errorReply(err instanceof ApiError ? err : serving.toApiError(err, requestId)));
  // Answering threw (a bug: a reply Node refuses to write): logged, and the client told at once rather than left waiting.
  const broken = (err: unknown) => {
    serving.logger.error({ reqId: requestId, error: describedFault(err) }, 'answering a request failed (a bug): the client got 500, or its connection was closed');
    try {
      if (res.headersSent) throw err;
      sendRaw(res, requestId, errorReply(new ApiError('internal', 'internal error: this request\'s answer could not be written (the server logged it)')));
    } catch {
      res.destroy();
    }
  };
  let admitted: unknown;
  try {
    admitted = route.admit(req);
  } catch (e) {
    fail(e instanceof ApiError ? answeredBeforeBody(req, e) : e);
    return true;
  }
  if (route.bodyless) {
    route.handle(req, NO_BODY, requestId, admitted).then(done, fail).catch(broken);
    return true;
  }
  collectBody(req, res, serving.bodyLimit, (body) => {
    if (body instanceof ApiError) return fail(body);
    route.handle(req, body, requestId, admitted).then(done, fail).catch(broken);
  });
  return true;
}

function sendRaw(res: ServerResponse, requestId: string, reply: RawReply): void {
  const { body } = reply;
  if (res.headersSent || res.destroyed) {
    if (body instanceof Readable) body.destroy(); // a client gone before the file was ready: its temp file goes too
    return;
  }
  const headers: Record<string, string | number> = { 'x-request-id': requestId, ...reply.headers };
  if (body instanceof Readable) {
    res.writeHead(reply.status, headers);
    pipeline(body, res, (err) => {
      if (err) res.destroy();
    });
    return;
  }
  headers['content-type'] ??= JSON_TYPE;
  headers['content-length'] = Buffer.byteLength(body);
  res.writeHead(reply.status, headers);
  res.end(body);
}
