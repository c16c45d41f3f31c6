// SPEC 3 for requests that never become requests: what Node's HTTP parser rejects (a garbage request line, a bad
// header, Content-Length with Transfer-Encoding, headers over the limit, a client too slow to send them) gets the
// same JSON error shape, a message naming the problem and an x-request-id, on every listener, instead of Node's
// empty 400.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { requestIdOf } from './raw-route.ts';

/**
 * How long a client may take to send its request headers, and its whole request; a body still arriving past that
 * must keep up BODY_MIN_BYTES_PER_S on average (an upload to an app or an import of 1 GiB is not cut while it flows).
 */
export const HEADERS_TIMEOUT_MS = 15_000;
export const REQUEST_TIMEOUT_MS = 120_000;
export const BODY_MIN_BYTES_PER_S = 1024;
/** The code watchBodies raises for a body that came too slowly (Node's own ERR_HTTP_REQUEST_TIMEOUT is the headers'). */
const BODY_TIMEOUT = 'SCOPEBASE_BODY_TIMEOUT';
/** Node's limit on the request line and headers together (`--max-http-header-size`). */
const MAX_HEADER_BYTES = 16 * 1024;

interface Refusal { status: number; code: string; message: string }

const bad = (message: string): Refusal => ({ status: 400, code: 'invalid_request', message });

/** Request smuggling's shape (RFC 9112 6.3): llhttp names it under either header's code, by which came second. */
const BOTH_LENGTHS = bad('both Content-Length and Transfer-Encoding were sent: a request carries one of them (Content-Length, or Transfer-Encoding: chunked), never both');

/**
 * What to answer for an error of Node's HTTP parser (llhttp's `HPE_*` codes, Node's own overflow and timeout codes).
 * Some codes stand for several problems: llhttp's `reason` (a fixed text of the parser, never the client's bytes)
 * tells them apart, and a reason this does not know still gets its code's wording.
 */
function refusal(code: string | undefined, reason = ''): Refusal {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, code: 'payload_too_large', message: `the request line and headers are over ${MAX_HEADER_BYTES / 1024} KiB` };
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return { status: 413, code: 'payload_too_large', message: 'the chunked body is malformed: a chunk\'s extensions are over 16 KiB' };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, code: 'invalid_request', message: `the request's headers were not received within ${HEADERS_TIMEOUT_MS / 1000} s` };
    case BODY_TIMEOUT:
      return { status: 408, code: 'invalid_request', message: `the request's body came too slowly: it must be complete within ${REQUEST_TIMEOUT_MS / 1000} s, or keep coming at ${BODY_MIN_BYTES_PER_S / 1024} KiB/s on average after that, never stopping for ${REQUEST_TIMEOUT_MS / 1000} s` };
    case 'HPE_UNEXPECTED_CONTENT_LENGTH': // llhttp: "Duplicate Content-Length"
      return bad('Content-Length is sent more than once: send it once');
    case 'HPE_INVALID_CONTENT_LENGTH':
      return /Transfer-Encoding/i.test(reason) ? BOTH_LENGTHS : bad('Content-Length is not a whole number of bytes (digits only, below 2^64)');
    case 'HPE_INVALID_TRANSFER_ENCODING':
      return /Content-Length/i.test(reason) ? BOTH_LENGTHS : bad('Transfer-Encoding is malformed: a request\'s must end with chunked, named once (this server decodes no other coding); send the body as it is with Content-Length, or chunked');
    case 'HPE_INVALID_CHUNK_SIZE':
      return bad('the chunked body is malformed: a chunk size is not a hexadecimal number below 2^64');
    case 'HPE_INVALID_EOF_STATE':
      return bad('the connection ended before the whole request was received (its headers or its body were cut short)');
    case 'HPE_PAUSED_H2_UPGRADE':
      return { status: 505, code: 'invalid_request', message: 'HTTP/2 is not served here (no prior knowledge, no h2c): this listener speaks HTTP/1.1' };
    case 'HPE_INVALID_METHOD':
      return bad('the request line is malformed: the method is not one HTTP defines (GET, POST, … in capitals), or the line is not a request line');
    case 'HPE_INVALID_URL':
      return bad('the request line is malformed: its target holds a character HTTP does not allow (a space, a control character or a byte over 0x7F): percent-encode it');
    case 'HPE_INVALID_VERSION':
      return /CRLF/i.test(reason) ? bad('the request line does not end with CRLF right after its HTTP version') : bad('the request line is malformed: its HTTP version is not 1.0 or 1.1');
    case 'HPE_INVALID_CONSTANT':
      return bad('the request line is malformed: expected METHOD /path HTTP/1.1 (a space in the path is percent-encoded as %20)');
    case 'HPE_INVALID_HEADER_TOKEN':
      if (/value char/i.test(reason)) return bad('a request header is malformed: its value holds a control character HTTP does not allow');
      if (/whitespace after header value/i.test(reason)) return bad('a request header is malformed: it is folded onto a second line (obsolete line folding): send each header on one line');
      return bad('a request header is malformed: its name is empty, has no colon after it, or holds a space or another character HTTP does not allow');
    case 'HPE_STRICT': case 'HPE_CR_EXPECTED': case 'HPE_LF_EXPECTED': case 'HPE_UNEXPECTED_SPACE':
      if (/chunk/i.test(reason)) return bad('the chunked body is malformed: a chunk is not framed as HTTP/1.1 says (its size, its extensions, CRLF after its size and after its data)');
      return bad('a line of the request does not end with CRLF (a bare CR or LF in the request line or a header)');
    default:
      return bad('the request is not valid HTTP/1.1');
  }
}

/** How often Node looks for requests past their time (its default, 30 s, answered the 120-s limit at up to 150 s). */
export const TIMEOUT_CHECK_MS = 2_000;

/** Sets the slow-client timeouts on a listener: Node's for the headers, watchBodies' for the body. */
export function limitSlowClients(server: Server): void {
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  // Node's requestTimeout cut every body at 120 s, an upload still flowing at 10 MB/s too.
  server.requestTimeout = 0;
  watchBodies(server);
}

interface Watched { start: number; lastByteAt: number; bytesRead: number; received: number }

/**
 * A request body is cut (408, as clientError) once no byte of it came for REQUEST_TIMEOUT_MS, or once past that time
 * it averages under BODY_MIN_BYTES_PER_S: a stalled or trickling client cannot hold its connection, a slow upload can.
 * The socket's bytesRead counts what arrived (the body stream is its consumer's alone to read).
 */
function watchBodies(server: Server): void {
  const watched = new Map<IncomingMessage, Watched>();
  server.on('request', (req: IncomingMessage) => {
    if (req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined) return;
    const now = Date.now();
    watched.set(req, { start: now, lastByteAt: now, bytesRead: req.socket.bytesRead, received: 0 });
    // Let go once the body is in, or the request is gone: kept until the next sweep, 2 s of requests would outlive
    // their turn (GC pauses).
    const forget = () => watched.delete(req);
    req.once('end', forget);
    req.once('close', forget);
  });
  const timer = setInterval(() => {
    const now = Date.now();
    for (const [req, w] of watched) {
      // A body a failed pipeline destroyed has no socket left (req.socket is null): a cluster follower whose disk
      // filled while it received a snapshot stopped here, every org with it.
      const socket = req.socket as IncomingMessage['socket'] | null;
      if (req.complete || socket === null || socket.destroyed) {
        watched.delete(req);
        continue;
      }
      const read = socket.bytesRead;
      if (read > w.bytesRead) {
        w.received += read - w.bytesRead;
        w.bytesRead = read;
        w.lastByteAt = now;
      }
      const stalled = now - w.lastByteAt > REQUEST_TIMEOUT_MS;
      const trickling = now - w.start > REQUEST_TIMEOUT_MS + (w.received / BODY_MIN_BYTES_PER_S) * 1000;
      if (!stalled && !trickling) continue;
      watched.delete(req);
      try {
        server.emit('clientError', Object.assign(new Error('request body timeout'), { code: BODY_TIMEOUT }), socket);
      } catch {
        socket.destroy(); // a throw in this timer would stop the process (every org): the slow client just goes
      }
    }
  }, TIMEOUT_CHECK_MS).unref();
  server.once('close', () => clearInterval(timer));
}

const answered = new WeakSet<Duplex>();

/** Answers what the parser rejects in SPEC 3's shape (Fastify's `clientErrorHandler`: the one handler of the event). */
export function answerClientError(err: Error & { code?: string; reason?: unknown; rawPacket?: unknown }, socket: Duplex): void {
  if (answered.has(socket)) return; // the rest of a request already answered: still being read and dropped
  // Bytes after a request that said Connection: close (RFC 9112 9.6): that request is answered as usual, then the
  // connection closes; what came after it is not a request, and is not answered.
  if (err.code === 'HPE_CLOSED_CONNECTION') return;
  // A request whose headers were taken and whose body then broke the parser (`Transfer-Encoding: gzip`, a bad chunk
  // size) is in flight: answered here too, unless its response has begun (then the bytes would corrupt it).
  const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse })._httpMessage;
  // A reset or a half-written response: nobody is left to read an answer.
  if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  answered.add(socket);
  const r = refusal(err.code, typeof err.reason === 'string' ? err.reason : '');
  // A reply to HEAD has no body (RFC 9110 9.3.2): a client reads none, and the bytes would break its parser. The
  // method is read from the bytes that failed, which hold the request line when the request came in one piece (as
  // an oversized header from a client on loopback or behind a proxy does).
  const head = inFlight ? inFlight.req.method === 'HEAD' : Buffer.isBuffer(err.rawPacket) && err.rawPacket.toString('latin1', 0, 5) === 'HEAD ';
  endWith(socket, r, inFlight ? requestIdOf(inFlight.req) : randomUUID(), head);
}

/** Writes SPEC 3's answer straight on the socket and closes the connection. */
function endWith(socket: Duplex, r: Refusal, id: string, head: boolean): void {
  const body = JSON.stringify({ error: { code: r.code, message: r.message } });
  socket.end(`HTTP/1.1 ${r.status} ${STATUS_CODES[r.status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${id}\r\nconnection: close\r\n\r\n${head ? '' : body}`);
  // What the client is still sending is read and dropped: closing with it unread would reset the connection,
  // and the client would lose the answer. A client that never stops is cut after a second.
  socket.resume();
  setTimeout(() => socket.destroy(), 1000).unref();
}

/**
 * CONNECT asks for a tunnel, a forward proxy's job: Node closes such a connection without a word when nothing listens
 * for it. It gets SPEC 3's answer, as nginx answers it 400. Returns the status, for the access log.
 */
export function answerConnect(req: IncomingMessage, socket: Duplex): number {
  const target = JSON.stringify(String(req.url ?? '').slice(0, 100));
  endWith(socket, bad(`CONNECT ${target} asks for a tunnel, and this server is no forward proxy: send the request itself (GET, POST, …) for a path on it`), requestIdOf(req), false);
  return 400;
}
