// Streaming HTTP forwarding with undici, and SPEC 8's x-forwarded-* rules (kept and extended only from TRUSTED_PROXIES).
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import { PassThrough } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Agent, request, type Dispatcher } from 'undici';
import { ApiError } from '../shared/errors.ts';
import { FORWARDED_TRANSPORT, INTERNAL_PREFIX, isForwarding, isProxyOnly } from '../shared/headers.ts';
import { safeDecode, withoutTrailingSlashes } from '../shared/names.ts';
import { declaresBody } from '../shared/body-budget.ts';

/** `expect` too: Node answered 100-continue to the client already, and undici refuses to send it (every such request was 503). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'http2-settings', 'expect']);

function first(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

/**
 * The x-forwarded-* headers for the next hop; a client's copies survive only when its address is trusted, and then
 * only these four (extended) and the transport facts of FORWARDED_TRANSPORT (as sent): never an identity header.
 */
export function forwardedHeaders(req: IncomingMessage, trusted: boolean, prefix: string): Record<string, string> {
  const peer = (req.socket.remoteAddress ?? '').replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '');
  const h = req.headers;
  const xff = trusted ? first(h['x-forwarded-for']) : undefined;
  const proto = trusted ? first(h['x-forwarded-proto']) : undefined;
  const host = trusted ? first(h['x-forwarded-host']) : undefined;
  const pre = trusted ? first(h['x-forwarded-prefix']) : undefined;
  const out: Record<string, string> = {
    'x-forwarded-for': xff ? `${xff}, ${peer}` : peer,
    'x-forwarded-proto': proto ?? ('encrypted' in req.socket ? 'https' : 'http'),
    'x-forwarded-host': host ?? String(h.host ?? ''),
    'x-forwarded-prefix': `${withoutTrailingSlashes(pre ?? '')}${prefix}`,
  };
  for (const name of trusted ? FORWARDED_TRANSPORT : []) {
    const value = first(h[name]);
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/**
 * The scheme the browser saw, exactly as Fastify's request.protocol reads it: a trusted peer's x-forwarded-proto, its
 * last entry (`https, https` from two layers that each append is https), else the socket's. Read any other way on
 * some routes, a list made them plain HTTP, where the `session` cookie a sibling host can plant counted.
 */
function protocolOf(req: IncomingMessage, trusted: boolean): string {
  const proto = first(req.headers['x-forwarded-proto']);
  if (trusted && proto) return proto.slice(proto.lastIndexOf(',') + 1).trim();
  return 'encrypted' in req.socket ? 'https' : 'http';
}

/**
 * What the session resolvers read of a request that did not go through Fastify (upgrades, the raw /verify route):
 * URL, headers, org, and the scheme the browser saw (protocolOf, as request.protocol).
 */
export function sessionView(req: IncomingMessage, org: string, trusted: boolean): FastifyRequest {
  return { url: req.url, headers: req.headers, org, raw: req, protocol: protocolOf(req, trusted), ip: req.socket.remoteAddress ?? '' } as unknown as FastifyRequest;
}

/** Copies end-to-end request headers; drops hop-by-hop, internal, identity and forwarding ones (set again by the caller). */
export function endToEndHeaders(headers: IncomingHttpHeaders, dropCookie?: (cookie: string | string[] | undefined) => string | undefined): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const listed = new Set(String(headers.connection ?? '').toLowerCase().split(',').map((s) => s.trim()));
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name)) continue;
    if (isProxyOnly(name) || isForwarding(name)) continue;
    out[name] = value;
  }
  if (dropCookie) {
    const cookie = dropCookie(headers.cookie);
    if (cookie === undefined) delete out.cookie;
    else out.cookie = cookie;
  }
  return out;
}

export function responseHeaders(headers: IncomingHttpHeaders | Record<string, string | string[] | undefined>, privateCookies: string[] = []): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const listed = new Set(String(headers.connection ?? '').toLowerCase().split(',').map((s) => s.trim()));
  for (const [name, value] of Object.entries(headers)) {
    // x-scopebase-* are the product's own, between its parts: an upstream's never reach the caller.
    if (value === undefined || HOP_BY_HOP.has(name) || listed.has(name) || name.startsWith(INTERNAL_PREFIX)) continue;
    if (name === 'set-cookie' && privateCookies.length) {
      const kept = [value].flat().filter((line) => !setsCookie(line, privateCookies));
      if (kept.length) out[name] = kept;
      continue;
    }
    out[name] = value;
  }
  return out;
}

/**
 * Whether a Set-Cookie line sets one of `names` (an app may not plant or clear the org's session: fixation). A cookie
 * without a name (`=session=x`) counts as the name in its value: browsers send it back as that value alone, `session=x`.
 */
export function setsCookie(line: string, names: string[]): boolean {
  const pair = line.split(';', 1)[0]!.trim().replace(/^=\s*/, '');
  const eq = pair.indexOf('=');
  return eq !== -1 && names.includes(pair.slice(0, eq).trim());
}

/** Lets a plugin stream request bodies instead of buffering them (Fastify's parsers are replaced in this context only). */
export function streamBodies(app: FastifyInstance): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, _payload, done) => done(null));
}


/** How long an upstream (an app, `serve account`) may take to begin its answer, as nginx's proxy_read_timeout. */
const UPSTREAM_HEADERS_TIMEOUT_MS = 60_000;

/** `connections`: at most this many to each origin, more requests wait in the pool (undici's default: no bound). */
export function createAgent(connections?: number): Agent {
  return new Agent({ connect: { timeout: 5_000 }, headersTimeout: UPSTREAM_HEADERS_TIMEOUT_MS, bodyTimeout: 300_000, keepAliveTimeout: 10_000, connections });
}

const ENCODED_DOT_SEGMENT = /(^|[/\\])\.\.?([/\\]|$)/;
/** `..;x` and `.;x`: Tomcat, Jetty and Spring drop a segment's `;parameters` before resolving dot segments. */
const PARAMETER_DOT_SEGMENT = /(^|[/\\])\.\.?;/;

/**
 * `rest` (a request's path and query, as sent) under the path of `base` (an app's URL, ACCOUNT_SERVICE_URL). The path
 * is normalized under a fixed host first, so `//host`, `\\host` and dot segments can neither change the host nor climb
 * out of the base path (SSRF; another app on the same upstream past its requireSession; another service behind a
 * gateway that routes by path, sent the proxy token).
 */
export function urlUnder(base: string, rest: string): URL {
  const root = new URL(base);
  const q = rest.indexOf('?');
  const normalized = new URL(`http://app.invalid${q === -1 ? rest : rest.slice(0, q)}`).pathname;
  // `..%2F` or `%2F..` survive that normalization, and an upstream that decodes `%2F` before resolving dot segments
  // (nginx, many frameworks) would climb out of the base path there: refused, as no real page needs them.
  if (ENCODED_DOT_SEGMENT.test(safeDecode(normalized))) throw new ApiError('invalid_request', 'the path has a dot segment hidden behind an encoded / or \\');
  // The same climb for upstreams that read `/base/..;/x` as `/x` (a known Tomcat bypass); no real page needs it.
  if (PARAMETER_DOT_SEGMENT.test(safeDecode(normalized))) throw new ApiError('invalid_request', 'the path has a dot segment with ;parameters (`..;`), which Java servers read as `..`');
  const url = new URL(root.origin);
  url.pathname = withoutTrailingSlashes(root.pathname) + normalized; // the pathname setter never changes the host
  url.search = q === -1 ? '' : rest.slice(q);
  return url;
}

/** Looks at the upstream's answer before it is relayed: an ApiError replaces it (its body is dropped), null relays it. */
export type AnswerCheck = (res: Dispatcher.ResponseData, requestId: string) => ApiError | null;

/** Streams the request to `target` (`read`: its body, read already) and the answer back; an unreachable upstream is 503 unavailable. */
export async function forwardHttp(req: FastifyRequest, reply: FastifyReply, target: URL, headers: Record<string, string | string[]>, dispatcher: Dispatcher, what: string, privateCookies: string[] = [], check?: AnswerCheck, read?: Buffer): Promise<FastifyReply> {
  const abort = new AbortController();
  reply.raw.once('close', () => {
    if (!reply.raw.writableFinished) abort.abort();
  });
  // undici destroys the body stream it is given when the upstream fails. Given req.raw itself, that left the rest
  // of the body unread and the socket stopped: the connection hung, and the client's next request on it was never
  // answered. So it gets a pipe, and on failure the rest of the body is read and dropped (as Node does with a body
  // nobody read) before the 503 goes out on a connection that still works.
  const piped = read === undefined && declaresBody(req.raw) ? req.raw.pipe(new PassThrough()) : undefined;
  const body = read ?? piped;
  let res: Dispatcher.ResponseData;
  try {
    res = await request(target, {
      // The upstream logs under the proxy's request id, the one the caller gets back (SPEC 3: echoed if it sent one).
      method: req.method as Dispatcher.HttpMethod, headers: { ...headers, 'x-request-id': req.id }, dispatcher, signal: abort.signal, body,
    });
  } catch (err) {
    if (piped && !req.raw.readableEnded) {
      req.raw.unpipe(piped);
      req.raw.resume();
    }
    const code = (err as { code?: string }).code;
    req.log.warn({ err: { message: (err as Error).message, code }, upstream: target.origin }, `${what} unreachable`);
    // One that took the request and said nothing is reachable: a person looks for a slow app, not a down one.
    const why = code === 'UND_ERR_HEADERS_TIMEOUT' ? `did not answer within ${UPSTREAM_HEADERS_TIMEOUT_MS / 1000} s` : 'is not reachable right now';
    throw new ApiError('unavailable', `the ${what} ${why}`, undefined, { 'retry-after': '5' });
  }
  const refused = check?.(res, req.id) ?? null;
  if (refused !== null) {
    res.body.dump().catch(() => {}); // the upstream's own page is not relayed: read and dropped, its connection reused
    req.log.warn({ upstream: target.origin, status: res.statusCode }, `the gateway in front of the ${what} answered for it`);
    throw refused;
  }
  reply.code(res.statusCode);
  for (const [name, value] of Object.entries(responseHeaders(res.headers, privateCookies))) {
    if (name !== 'x-request-id') reply.header(name, value); // the proxy's stays: one id per answer, the caller's if it sent one
  }
  return reply.send(res.body);
}
