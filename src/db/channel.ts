// The proxy ↔ `serve db` channel: an HTTP upgrade (authenticated once, by the proxy token) to length-prefixed
// frames (executor/protocol.ts), many requests in flight per connection, replies matched by sequence number.
// An HTTP/1.1 hop cost the proxy ~60 µs of CPU per request (client) and the service ~15 µs more (parser).
import type { IncomingMessage } from 'node:http';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import { ApiError } from '../shared/errors.ts';
import type { Logger } from '../shared/log.ts';
import { checkOrg, checkRepo } from '../shared/names.ts';
import type { DbHandler, DbRequest, DbResponse } from './contract.ts';
import { encodeFrame, FrameDecoder, type Frame } from './executor/protocol.ts';
import { errorReply, logAccess } from '../shared/raw-route.ts';
import { CHANNEL_CONNECTIONS } from '../shared/connection-cap.ts';

export const CHANNEL_PATH = '/_scopebase/db-channel';
export const CHANNEL_PROTOCOL = 'scopebase-db/1';
/** Room for a frame's header next to a body of the largest allowed size. */
const HEADER_ROOM = 64 * 1024;

/** Writes made in one tick leave in one syscall: fewer wake-ups of the peer on a busy machine. */
function corkedWriter(socket: Socket): (frame: Buffer) => void {
  let corked = false;
  return (frame) => {
    if (!corked) {
      corked = true;
      socket.cork();
      process.nextTick(() => {
        corked = false;
        socket.uncork();
      });
    }
    socket.write(frame);
  };
}

export interface ChannelServerOptions {
  db: DbHandler;
  logger: Logger;
  maxBodyBytes: number;
  fromProxy(token: string | string[] | undefined): boolean;
  tokenHeader: string;
}

/** `serve db`'s side: takes upgrades on CHANNEL_PATH from the proxy and serves their frames. */
export class ChannelServer {
  private readonly opts: ChannelServerOptions;
  private readonly open = new Map<Socket, { inflight: number }>();
  private closing = false;

  constructor(opts: ChannelServerOptions) {
    this.opts = opts;
  }

  accept(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on('error', () => {}); // a peer that went away; 'close' cleans up
    if (req.url !== CHANNEL_PATH || String(req.headers.upgrade ?? '').toLowerCase() !== CHANNEL_PROTOCOL) return refuse(socket, 404, 'Not Found');
    if (!this.opts.fromProxy(req.headers[this.opts.tokenHeader])) return refuse(socket, 403, 'Forbidden');
    if (this.closing) return refuse(socket, 503, 'Service Unavailable');
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${CHANNEL_PROTOCOL}\r\n\r\n`);
    socket.setNoDelay(true);
    const state = { inflight: 0 };
    this.open.set(socket, state);
    socket.on('close', () => this.open.delete(socket));
    const decoder = new FrameDecoder(this.opts.maxBodyBytes + HEADER_ROOM);
    const write = corkedWriter(socket);
    const onData = (chunk: Buffer) => {
      for (const frame of framesOf(decoder, socket, chunk)) this.serve(socket, state, frame, write);
    };
    if (head.length) onData(head);
    socket.on('data', onData);
  }

  private serve(socket: Socket, state: { inflight: number }, frame: Frame, write: (f: Buffer) => void): void {
    state.inflight++;
    const h = frame.header;
    const requestId = String(h.rid ?? '');
    const started = performance.now();
    const answer = (res: DbResponse) => {
      state.inflight--;
      if (res.body instanceof Readable) {
        res.body.destroy();
        res = errorReply(new ApiError('invalid_request', 'snapshots are served over HTTP, not the channel'));
      }
      if (!socket.destroyed) write(encodeFrame(frame.seq, { status: res.status, headers: res.headers ?? {} }, res.body as Buffer | string));
      logAccess(this.opts.logger, requestId, 'POST', `/${String(h.repo)}/_db/${String(h.op)}`, res.status, performance.now() - started, { channel: true });
      if (this.closing && state.inflight === 0) socket.end();
    };
    const fail = (err: unknown) => {
      if (!(err instanceof ApiError)) this.opts.logger.error({ err, reqId: requestId }, 'unhandled error');
      answer(errorReply(err instanceof ApiError ? err : new ApiError('internal', 'internal error')));
    };
    if (this.closing) return fail(new ApiError('unavailable', 'the server is shutting down', undefined, { 'retry-after': '1' }));
    try {
      const req: DbRequest = {
        op: String(h.op), org: checkOrg(String(h.org)), repo: checkRepo(String(h.repo)),
        authorization: typeof h.auth === 'string' ? h.auth : undefined, body: frame.body, requestId,
      };
      this.opts.db.handle(req).then(answer, fail);
    } catch (err) {
      fail(err);
    }
  }

  /** New requests get 503; each connection ends once its last reply is written. */
  close(): void {
    this.closing = true;
    for (const [socket, state] of this.open) if (state.inflight === 0) socket.end();
  }
}

/** The whole frames of `chunk`; none, and the connection cut, when the peer sent a malformed or oversized frame (no resync is possible). */
function framesOf(decoder: FrameDecoder, socket: Socket, chunk: Buffer): Frame[] {
  try {
    return decoder.push(chunk);
  } catch {
    socket.destroy();
    return [];
  }
}

function refuse(socket: Socket, status: number, text: string): void {
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}

interface Pending {
  resolve(res: DbResponse): void;
  reject(err: ApiError): void;
}

/** One upgraded connection from the proxy. */
class ChannelConnection {
  private readonly socket: Socket;
  private readonly pending = new Map<number, Pending>();
  private readonly write: (f: Buffer) => void;
  private seq = 0;

  constructor(socket: Socket, head: Buffer, onClose: () => void) {
    this.socket = socket;
    this.write = corkedWriter(socket);
    socket.setNoDelay(true);
    const decoder = new FrameDecoder();
    // A frame that does not parse (a peer of another version, or no `serve db` at all) cuts the connection: its
    // requests are answered 503 on close. Thrown from this handler, it stopped the proxy, and every org with it.
    const onData = (chunk: Buffer) => {
      for (const f of framesOf(decoder, socket, chunk)) {
        const p = this.pending.get(f.seq);
        if (!p) continue;
        const status = f.header.status;
        // No HTTP status: writing the answer would throw, and its request would wait for ever. Cut as malformed.
        if (typeof status !== 'number' || !Number.isInteger(status) || status < 100 || status > 599) return void socket.destroy();
        this.pending.delete(f.seq);
        p.resolve({ status, headers: f.header.headers as Record<string, string>, body: f.body });
      }
    };
    socket.on('error', () => {});
    if (head.length) onData(head);
    socket.on('data', onData);
    socket.on('close', () => {
      // These requests were sent: whether a write among them committed is not known here.
      for (const p of this.pending.values()) p.reject(outcomeUnknown());
      this.pending.clear();
      onClose();
    });
  }

  send(req: DbRequest): Promise<DbResponse> {
    const seq = (this.seq = (this.seq + 1) >>> 0);
    return new Promise((resolve, reject) => {
      this.pending.set(seq, { resolve, reject });
      const header: Record<string, string> = { op: req.op, org: req.org, repo: req.repo, rid: req.requestId };
      if (req.authorization !== undefined) header.auth = req.authorization;
      this.write(encodeFrame(seq, header, req.body));
    });
  }

  close(): void {
    this.socket.end();
  }
}

export function outcomeUnknown(): ApiError {
  return new ApiError('unavailable', 'the database control service did not finish answering and whether a write committed is unknown: read the data back before retrying', { committed: null }, { 'retry-after': '1' });
}

/** The proxy's side: a few channel connections, opened on first use and again after one drops. */
export class ChannelClient {
  private readonly url: URL;
  private readonly token: string;
  private readonly tokenHeader: string;
  private readonly size: number;
  private readonly connections: ChannelConnection[] = [];
  private connecting = 0;
  private next = 0;
  /** Until then (performance.now(): a wall-clock jump must not lengthen it), the caller uses HTTP (the upgrade was refused or failed). */
  private retryAt = 0;
  private closed = false;

  constructor(opts: { url: string; token: string; tokenHeader: string; connections?: number }) {
    this.url = new URL(opts.url);
    this.token = opts.token;
    this.tokenHeader = opts.tokenHeader;
    this.size = opts.connections ?? CHANNEL_CONNECTIONS;
  }

  /** A request over the channel, or null when no connection is ready (the caller uses HTTP meanwhile). */
  trySend(req: DbRequest): Promise<DbResponse> | null {
    if (this.closed) return null;
    if (this.connections.length + this.connecting < this.size && performance.now() >= this.retryAt) this.connect();
    if (this.connections.length === 0) return null;
    const conn = this.connections[this.next++ % this.connections.length]!;
    return conn.send(req);
  }

  private connect(): void {
    this.connecting++;
    // TLS when DB_SERVICE_URL says https, as the Pool beside it does: over plain TCP the proxy token went in the clear.
    const tls = this.url.protocol === 'https:';
    const req = (tls ? httpsRequest : httpRequest)({
      host: this.url.hostname.replace(/^\[(.*)\]$/, '$1'), port: this.url.port || (tls ? 443 : 80), path: CHANNEL_PATH, method: 'GET', agent: false,
      headers: { connection: 'Upgrade', upgrade: CHANNEL_PROTOCOL, [this.tokenHeader]: this.token },
    });
    const failed = () => {
      this.connecting--;
      this.retryAt = performance.now() + 1000;
    };
    req.on('upgrade', (_res, socket, head) => {
      this.connecting--;
      if (this.closed) return socket.destroy();
      const conn = new ChannelConnection(socket, head, () => {
        const i = this.connections.indexOf(conn);
        if (i !== -1) this.connections.splice(i, 1);
      });
      this.connections.push(conn);
    });
    req.on('response', (res) => {
      res.resume();
      failed();
    });
    req.on('error', failed);
    req.end();
  }

  close(): void {
    this.closed = true;
    for (const c of this.connections) c.close();
  }
}
