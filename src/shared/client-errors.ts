// SPEC 3 for requests that never become requests: what Node's HTTP parser rejects (a garbage request line, a bad
// header, Content-Length with Transfer-Encoding, headers over the limit, a client too slow to send them) gets the
// same JSON error shape and an x-request-id, on every listener, instead of Node's empty 400.
import { randomUUID } from 'node:crypto';
import { STATUS_CODES, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { requestIdOf } from './raw-route.ts';

/** How long a client may take to send its request headers, and its whole request (uploads included). */
export const HEADERS_TIMEOUT_MS = 15_000;
export const REQUEST_TIMEOUT_MS = 120_000;
/** Node's limit on the request line and headers together (`--max-http-header-size`). */
const MAX_HEADER_BYTES = 16 * 1024;

interface Refusal { status: number; code: string; message: string }

function refusal(code: string | undefined): Refusal {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return { status: 431, code: 'payload_too_large', message: `the request line and headers are over ${MAX_HEADER_BYTES / 1024} KiB` };
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return { status: 408, code: 'invalid_request', message: `the request was not received within ${HEADERS_TIMEOUT_MS / 1000} s (headers) or ${REQUEST_TIMEOUT_MS / 1000} s (whole request)` };
    case 'HPE_UNEXPECTED_CONTENT_LENGTH':
      return { status: 400, code: 'invalid_request', message: 'Content-Length and Transfer-Encoding together: send one of them' };
    case 'HPE_INVALID_CONTENT_LENGTH':
      return { status: 400, code: 'invalid_request', message: 'Content-Length is not one non-negative number' };
    case 'HPE_INVALID_TRANSFER_ENCODING':
      return { status: 400, code: 'invalid_request', message: 'Transfer-Encoding is malformed, or sent with Content-Length: send one of them' };
    case 'HPE_INVALID_CHUNK_SIZE':
      return { status: 400, code: 'invalid_request', message: 'the chunked body is malformed' };
    case 'HPE_INVALID_HEADER_TOKEN': case 'HPE_INVALID_EOF_STATE': case 'HPE_LF_EXPECTED': case 'HPE_CR_EXPECTED':
      return { status: 400, code: 'invalid_request', message: 'a request header is malformed (a name holds a space or another character HTTP does not allow)' };
    case 'HPE_INVALID_METHOD': case 'HPE_INVALID_URL': case 'HPE_INVALID_VERSION': case 'HPE_INVALID_CONSTANT':
      return { status: 400, code: 'invalid_request', message: 'the request line is malformed: expected METHOD /path HTTP/1.1 with the path percent-encoded' };
    default:
      return { status: 400, code: 'invalid_request', message: 'the request is not valid HTTP/1.1' };
  }
}

/** Sets the slow-client timeouts on a listener. */
export function limitSlowClients(server: Server): void {
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  server.requestTimeout = REQUEST_TIMEOUT_MS;
}

const answered = new WeakSet<Duplex>();

/** Answers what the parser rejects in SPEC 3's shape (Fastify's `clientErrorHandler`: the one handler of the event). */
export function answerClientError(err: Error & { code?: string; rawPacket?: unknown }, socket: Duplex): void {
  if (answered.has(socket)) return; // the rest of a request already answered: still being read and dropped
  // A request whose headers were taken and whose body then broke the parser (`Transfer-Encoding: gzip`, a bad chunk
  // size) is in flight: answered here too, unless its response has begun (then the bytes would corrupt it).
  const inFlight = (socket as Duplex & { _httpMessage?: ServerResponse })._httpMessage;
  // A reset or a half-written response: nobody is left to read an answer.
  if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  answered.add(socket);
  const r = refusal(err.code);
  const body = JSON.stringify({ error: { code: r.code, message: r.message } });
  // A reply to HEAD has no body (RFC 9110 9.3.2): a client reads none, and the bytes would break its parser. The
  // method is read from the bytes that failed, which hold the request line when the request came in one piece (as
  // an oversized header from a client on loopback or behind a proxy does).
  const head = inFlight ? inFlight.req.method === 'HEAD' : Buffer.isBuffer(err.rawPacket) && err.rawPacket.toString('latin1', 0, 5) === 'HEAD ';
  const id = inFlight ? requestIdOf(inFlight.req) : randomUUID();
  socket.end(`HTTP/1.1 ${r.status} ${STATUS_CODES[r.status]}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${id}\r\nconnection: close\r\n\r\n${head ? '' : body}`);
  // What the client is still sending is read and dropped: closing with it unread would reset the connection,
  // and the client would lose the answer. A client that never stops is cut after a second.
  socket.resume();
  setTimeout(() => socket.destroy(), 1000).unref();
}
