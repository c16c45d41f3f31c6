// WebSocket upgrades to apps: same routing, session, origin and header rules as HTTP, then raw bytes piped both ways
// until either side closes or no byte passes for APPS_WS_IDLE_TIMEOUT_MS.
import { request as httpRequest, STATUS_CODES, type IncomingMessage, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../shared/errors.ts';
import { admitWebSocket, refuseUpgrade } from '../shared/connection-cap.ts';
import type { Logger } from '../shared/log.ts';
import type { AppRoute } from '../shared/config.ts';
import type { SessionResolver } from '../account/contract.ts';
import { withoutCookies } from '../account/cookies.ts';
import { identityHeaders } from '../account/identity-headers.ts';
import { endToEndHeaders, forwardedHeaders, sessionView, setsCookie } from './forward.ts';
import { stripSpoofableHeaders } from '../shared/headers.ts';
import { orgFromHost } from '../shared/host.ts';
import { hostConflict, logAccess, requestIdOf, toOriginForm } from '../shared/raw-route.ts';
import { appTarget, crossOrigin, upstreamUrl } from './apps.ts';

export interface WsOptions {
  apps: Map<string, AppRoute>;
  baseDomain: string;
  resolveSession: SessionResolver;
  /** Split mode: throws 503 when the account service is unreachable (AppsOptions). */
  signInReachable?: (req: FastifyRequest) => Promise<void>;
  /** Set-Cookie extending a session renewed while resolving this upgrade, as for HTTP (AppsOptions). */
  renewalCookie?: (req: FastifyRequest) => string | null;
  isTrusted: (address: string | undefined) => boolean;
  privateCookies: string[];
  /** A WebSocket that passes no byte either way for this long is closed, both sides (APPS_WS_IDLE_TIMEOUT_MS). */
  idleTimeoutMs: number;
  logger: Logger;
  /** Counts an upgrade's answer as an app request (scopebase_app_requests_total). */
  onAnswer?: (status: number) => void;
}

function refuse(socket: Duplex, err: ApiError, extraHeaders: string[] = []): void {
  const body = JSON.stringify(err.toBody());
  const headers = ['content-type', 'application/json; charset=utf-8', 'content-length', String(Buffer.byteLength(body)), 'connection', 'close', ...Object.entries(err.headers ?? {}).flat(), ...extraHeaders];
  socket.end(rawHead(err.status, STATUS_CODES[err.status] ?? '', headers) + body);
}

function rawHead(status: number, message: string, rawHeaders: string[]): string {
  let head = `HTTP/1.1 ${status} ${message}\r\n`;
  for (let i = 0; i < rawHeaders.length; i += 2) head += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return head + '\r\n';
}

/** An app's answer as relayed: its own x-request-id gives way to the proxy's, and it may not set the private cookies. */
function relayed(raw: string[], privateCookies: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (name === 'x-request-id' || (name === 'set-cookie' && setsCookie(raw[i + 1]!, privateCookies))) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/**
 * The head of an app's refusal of an upgrade, as relayed: its body arrives unframed (Node read its chunks), so the
 * framing and connection headers go and the body ends with the connection, as HTTP/1.1 allows (RFC 9112 6.3).
 */
function declinedHead(raw: string[], privateCookies: string[]): string[] {
  const out: string[] = [];
  const kept = relayed(raw, privateCookies);
  for (let i = 0; i < kept.length; i += 2) if (!FRAMING.has(kept[i]!.toLowerCase())) out.push(kept[i]!, kept[i + 1]!);
  return [...out, 'Connection', 'close'];
}
const FRAMING = new Set(['transfer-encoding', 'content-length', 'connection', 'keep-alive', 'upgrade', 'trailer', 'proxy-connection']);

/** Registers an 'upgrade' listener on the proxy's server; returns the function that removes it. */
export function attachWebSocketProxy(server: Server, opts: WsOptions): () => void {
  // Upgraded sockets are no longer the HTTP server's: close them ourselves when the proxy stops.
  const live = new Set<Duplex>();
  const track = (s: Duplex) => {
    live.add(s);
    s.once('close', () => live.delete(s));
  };
  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (refuseUpgrade(req, socket)) return; // a connection over a cap: answered 503
    const active = admitWebSocket(req, socket); // counted as its client's WebSocket until it closes
    if (active === null) return; // the client holds MAX_WEBSOCKETS_PER_CLIENT: answered 503
    track(socket);
    socket.on('error', () => socket.destroy());
    // SPEC 3: every answer carries x-request-id, the refusals and the relayed 101 included.
    const requestId = ['x-request-id', requestIdOf(req)];
    // Logged and counted as any request to an app, once, with the status the client got (101, a refusal, the app's).
    const started = performance.now();
    let answered = false;
    const answer = (status: number) => {
      if (answered) return;
      answered = true;
      logAccess(opts.logger, requestId[1]!, req.method, req.url, status, performance.now() - started, { upgrade: true });
      opts.onAnswer?.(status);
    };
    handle(req, socket, head, requestId, active, answer).catch((err) => {
      if (!(err instanceof ApiError)) opts.logger.error({ err }, 'websocket upgrade failed');
      const e = err instanceof ApiError ? err : new ApiError('internal', 'internal error');
      answer(e.status);
      refuse(socket, e, requestId);
    });
  };

  async function handle(req: IncomingMessage, socket: Duplex, head: Buffer, requestId: string[], active: () => void, answer: (status: number) => void): Promise<void> {
    const conflict = hostConflict(req);
    if (conflict !== null) throw new ApiError('invalid_request', conflict);
    toOriginForm(req);
    stripSpoofableHeaders(req.headers);
    if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket') throw new ApiError('not_found', 'only WebSocket upgrades are forwarded');
    const org = orgFromHost(req.headers.host, opts.baseDomain);
    const target = appTarget(org, req.url ?? '/', opts.apps);
    const trusted = opts.isTrusted(req.socket.remoteAddress);
    const view = sessionView(req, org, trusted);
    // A page of another origin (another org's host is one site with this one) opens it as nobody, or not at all.
    const foreign = crossOrigin(req.headers.origin, req.headers.host, view.protocol === 'https', 'a WebSocket upgrade', target.route);
    const session = foreign ? null : await opts.resolveSession(view);
    // Whatever the answer (101, the app's refusal, 503), a renewed session's cookie goes with it, as for HTTP.
    const renewed = opts.renewalCookie?.(view);
    const cookieHeaders = [...requestId, ...(renewed ? ['set-cookie', renewed] : [])];
    if (!session && target.route.requireSession) {
      await opts.signInReachable?.(view); // unreachable: 503, as for HTTP
      throw new ApiError('unauthenticated', 'this app requires a signed-in session');
    }
    const url = upstreamUrl(target.route, target.rest);
    const headers = {
      ...endToEndHeaders(req.headers, (c) => withoutCookies(c, opts.privateCookies)),
      ...forwardedHeaders(req, trusted, `/${target.rawRepo}`),
      ...(session ? identityHeaders(session.user) : {}),
      connection: 'Upgrade', upgrade: 'websocket', 'x-request-id': requestId[1]!,
    };
    if (socket.destroyed) return; // the client left while its session was looked up
    const upstream = (url.protocol === 'https:' ? httpsRequest : httpRequest)(url, { method: 'GET', headers, timeout: 10_000 });
    // A client gone before the app answers takes the app's connection down too: else it stays open, unread, for good.
    socket.once('close', () => upstream.destroy());
    upstream.on('timeout', () => upstream.destroy(new Error('upstream timeout')));
    upstream.on('error', () => {
      answer(503);
      refuse(socket, new ApiError('unavailable', 'the app is not reachable right now', undefined, { 'retry-after': '5' }), cookieHeaders);
    });
    upstream.on('response', (res) => {
      answer(res.statusCode ?? 502);
      // The app declined the upgrade: relay its answer as an ordinary response.
      socket.write(rawHead(res.statusCode ?? 502, res.statusMessage ?? '', [...declinedHead(res.rawHeaders, opts.privateCookies), ...cookieHeaders]));
      res.pipe(socket);
    });
    upstream.on('upgrade', (res, upSocket, upHead) => {
      answer(101);
      track(upSocket);
      upSocket.setTimeout(0);
      socket.write(rawHead(101, 'Switching Protocols', [...relayed(res.rawHeaders, opts.privateCookies), ...cookieHeaders]));
      if (upHead.length) socket.write(upHead);
      if (head.length) upSocket.write(head);
      upSocket.on('error', () => socket.destroy());
      socket.on('error', () => upSocket.destroy());
      upSocket.on('close', () => socket.destroy());
      socket.on('close', () => upSocket.destroy());
      upSocket.pipe(socket);
      socket.pipe(upSocket);
      // Idle both ways (the client socket's timer counts what it reads and what is written to it): both closed, as
      // nginx (proxy_read_timeout) and Cloudflare do; apps keep a quiet socket open with pings.
      (socket as Socket).setTimeout(opts.idleTimeoutMs, () => socket.destroy());
      socket.on('data', active);
      upSocket.on('data', active);
    });
    upstream.end();
  }

  server.on('upgrade', onUpgrade);
  return () => {
    server.off('upgrade', onUpgrade);
    for (const s of live) s.destroy();
  };
}
