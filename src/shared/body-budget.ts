// Request bodies held in memory, process-wide (docs/security.md, "Request bodies"). Every body a listener collects
// into memory (the raw routes, Fastify's buffering parser) is counted here from its headers on: its declared
// Content-Length is reserved before a byte of it is read (chunked: counted as it arrives), and given back when its
// response has gone or its connection has closed. Past MAX_BODY_BYTES_IN_FLIGHT, or past its owner's share of it (a
// quarter: one repo, or one client address; half: one org, all its repos), the request gets 503 `unavailable` with
// Retry-After, its body unread.
// Bodies streamed elsewhere (an import into a file, app traffic) are not counted.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, Gauge } from 'prom-client';
import { ApiError } from './errors.ts';
import { metrics } from './metrics.ts';
import { clientKey } from './trusted-peers.ts';

/** The default when nothing configured it (a listener built outside `startParts`, e.g. a test's own server). */
const DEFAULT_BYTES = 256 * 1024 * 1024;

/**
 * What one owner may hold of the budget, as a divisor of it: one repo (its secret checked on the headers) or one
 * client address (any other caller) a quarter, and one org, all its repos together, half. Eight tenants' bodies held
 * slowly took it all, and every other org's requests were 503; then one org's four repos did.
 */
const SHARES = { repo: 4, client: 4, org: 2 } as const;
type Kind = keyof typeof SHARES;
const SHARE_WORDS: Record<Kind, { who: string; part: string; others: string }> = {
  repo: { who: 'repo', part: 'a quarter', others: 'tenants\'' },
  client: { who: 'client address', part: 'a quarter', others: 'tenants\'' },
  org: { who: 'org', part: 'half', others: 'orgs\'' },
};

let max = DEFAULT_BYTES;
let held = 0;
/** Bytes held per owner (`repo org/name`, `org name`, `client address`); an owner holding nothing has no entry. */
const heldBy = new Map<string, number>();

new Gauge({
  name: 'scopebase_request_body_bytes_in_flight',
  help: 'Bytes of request bodies held in memory or reserved for them (declared Content-Length) right now, across the process\'s listeners (MAX_BODY_BYTES_IN_FLIGHT)',
  registers: [metrics],
  collect() {
    this.set(held);
  },
});
const refused = new Counter({
  name: 'scopebase_request_body_budget_refusals_total',
  help: 'Requests answered 503 because the bodies in flight would have gone past MAX_BODY_BYTES_IN_FLIGHT (limit="process"), or past the share of it one repo, one org or one client address may hold (limit="repo", "org", "client"), since start',
  labelNames: ['limit'],
  registers: [metrics],
});
for (const limit of ['process', 'repo', 'org', 'client']) refused.inc({ limit }, 0);

/** Sets the process's budget (startParts, from MAX_BODY_BYTES_IN_FLIGHT); the last caller wins: it is one process's memory. */
export function setBodyBudget(bytes: number): void {
  max = bytes;
}

/** Bytes held now (tests and the gauge). */
export function bodyBytesInFlight(): number {
  return held;
}

/** Whose shares a request's body counts against, when not its client address's: its repo and org (chargeToRepo). */
const owners = new WeakMap<IncomingMessage, string[]>();

/**
 * Counts the request's body against its repo's share: called once the repo's secret was found right on the headers.
 * Any other caller (a session, a signed webhook, a stranger) is counted against its client address, so no one but
 * the holder of a repo's secret can spend that repo's share.
 */
export function chargeToRepo(req: IncomingMessage, org: string, repo: string): void {
  owners.set(req, [`repo ${org}/${repo}`, `org ${org}`]);
}

/** The product's own traffic between nodes (a cluster's replication): counted in the budget, held to no share, never refused. */
const PRODUCT: string[] = [];

/**
 * Counts a request's body as the product's own (a follower's `/_cluster/*`, behind a node's token): held to a
 * tenant's share, a busy org's replication was refused, and its writes, committed, were answered 503 as unknown. It
 * is bounded where it is sent: a node's pool of 8 connections to a peer, a shipment of about 32 MiB of events each.
 */
export function chargeToProduct(req: IncomingMessage): void {
  owners.set(req, PRODUCT);
}

/** The client address a request's body is counted by, when it is not the peer's (a proxy's header it vouched for). */
export function chargeToClient(req: IncomingMessage, address: string): void {
  if (!owners.has(req)) owners.set(req, [`client ${clientKey(address)}`]);
}

/**
 * Takes `bytes` from the budget and from each of `owner`'s shares, or returns the refusal when that would go past
 * any. A body alone is always admitted (nothing else held: a route whose own body limit is above the budget, a
 * cluster's apply, still makes progress), and so is an owner's first body within the budget (its share may be under
 * one body).
 */
function take(owner: string[], bytes: number): ApiError | null {
  if (owner === PRODUCT) {
    held += bytes;
    return null;
  }
  if (held > 0 && held + bytes > max) return refuse('process', 'the server holds as many request bodies as it may (MAX_BODY_BYTES_IN_FLIGHT)');
  for (const key of owner) {
    const kind = key.slice(0, key.indexOf(' ')) as Kind;
    const mine = heldBy.get(key) ?? 0;
    const share = Math.floor(max / SHARES[kind]);
    const words = SHARE_WORDS[kind];
    if (mine > 0 && mine + bytes > share) return refuse(kind, `this ${words.who} holds its share of the request bodies in flight (${share} bytes, ${words.part} of MAX_BODY_BYTES_IN_FLIGHT), so that other ${words.others} requests still get in`);
  }
  held += bytes;
  for (const key of owner) heldBy.set(key, (heldBy.get(key) ?? 0) + bytes);
  return null;
}

function give(owner: string[], bytes: number): void {
  if (bytes === 0) return;
  held -= bytes;
  for (const key of owner) {
    const left = (heldBy.get(key) ?? 0) - bytes;
    if (left > 0) heldBy.set(key, left);
    else heldBy.delete(key);
  }
}

function refuse(limit: 'process' | Kind, why: string): ApiError {
  refused.inc({ limit });
  return new ApiError('unavailable', `${why}: nothing of this request ran, retry after a second`, { committed: false }, { 'retry-after': '1', connection: 'close' });
}

/**
 * Collects a request's body up to `limit` bytes, counted against the budget and its owner's share (its repo, else
 * `client`: the peer's address, or the client a trusted proxy named). `then` gets the body, or an ApiError (413 past
 * `limit`, 503 past the budget or the share) decided before the rest is read: the caller answers it with
 * `connection: close` (its headers say so), and Node drops the rest of the body. The bytes are given back when `res`
 * closes (its response sent, or the client gone); a client that goes away before the end gets no callback.
 */
export function collectBody(req: IncomingMessage, res: ServerResponse, limit: number, then: (body: Buffer | ApiError) => void, client = req.socket.remoteAddress): void {
  const refusal = refusedSmall.get(req);
  if (refusal !== undefined) return collectUncounted(req, refusal, then);
  const encoded = encodedBody(req);
  if (encoded !== null) return then(encoded);
  const owner = owners.get(req) ?? [`client ${clientKey(client)}`];
  let reserved = 0;
  let settled = false;
  const release = () => {
    give(owner, reserved);
    reserved = 0;
  };
  res.once('close', release);
  const declared = req.headers['content-length'];
  if (declared !== undefined) {
    const n = Number(declared); // Node's parser took it: a whole number
    if (n > limit) return then(tooLarge(limit));
    const over = take(owner, n);
    if (over !== null) return then(over);
    reserved = n;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  const stop = (err: ApiError) => {
    settled = true;
    chunks.length = 0;
    req.removeListener('data', onData);
    release(); // what was read goes now: nothing keeps it
    then(err);
  };
  const onData = (chunk: Buffer) => {
    size += chunk.length;
    if (size > limit) return stop(tooLarge(limit));
    // Chunked (or a body past its Content-Length, which Node's parser does not let through): counted as it arrives.
    if (size > reserved) {
      const over = take(owner, size - reserved);
      if (over !== null) return stop(over);
      reserved = size;
    }
    chunks.push(chunk);
  };
  req.on('data', onData);
  req.on('end', () => {
    if (!settled) then(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
  });
  req.on('error', () => {}); // an aborted request: the socket is gone, nothing to answer ('close' gives the bytes back)
}

/** A refused caller's small body (REFUSED_BODY_BYTES): read outside the budget; past that size, the refusal at once. */
function collectUncounted(req: IncomingMessage, refusal: ApiError, then: (body: Buffer | ApiError) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let settled = false;
  const onData = (chunk: Buffer) => {
    size += chunk.length;
    if (size <= REFUSED_BODY_BYTES) return void chunks.push(chunk);
    settled = true; // chunked, and longer than a refused caller may send
    chunks.length = 0;
    req.removeListener('data', onData);
    then(withClose(refusal));
  };
  req.on('data', onData);
  req.on('end', () => {
    if (!settled) then(Buffer.concat(chunks, size));
  });
  req.on('error', () => {});
}

/**
 * A body sent with a Content-Encoding (gzip, br, ...) is refused, unread: it would otherwise be taken as the
 * compressed bytes themselves (a JSON body as malformed, an import as garbage). Decoding is a front proxy's job.
 */
export function encodedBody(req: IncomingMessage): ApiError | null {
  const coding = req.headers['content-encoding']?.trim().toLowerCase();
  // trim, not /^\s*(identity)?\s*$/: its two runs of spaces traded 16 KB of U+00A0 for a second of the event loop.
  if (coding === undefined || coding === '' || coding === 'identity') return null;
  return new ApiError('invalid_request', 'the request body has a Content-Encoding this server does not decode: send it uncompressed (identity)', undefined, { 'accept-encoding': 'identity', connection: 'close' });
}

function tooLarge(limit: number): ApiError {
  return new ApiError('payload_too_large', `request body is over the size limit of ${limit} bytes`, { limitBytes: limit }, { connection: 'close' });
}

/**
 * A caller refused before its body is read (a wrong or missing secret) still has a body this small read, so that a
 * name inside it is answered first as SPEC 2 orders (400 invalid_name before authentication). It is not counted in
 * the budget (no stranger may spend the tenants' share): per connection it is bounded like the headers (16 KiB).
 */
export const REFUSED_BODY_BYTES = 16 * 1024;

/** Requests whose small body is read although their caller was refused (refuseBeforeBody), with the refusal. */
const refusedSmall = new WeakMap<IncomingMessage, ApiError>();

/** Whether the request comes with a body (a Content-Length other than 0, or chunked). */
export function declaresBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
}

/** A body declared over REFUSED_BODY_BYTES: never read for a refused caller. */
function declaredLarge(req: IncomingMessage): boolean {
  const declared = req.headers['content-length'];
  return declared !== undefined && Number(declared) > REFUSED_BODY_BYTES;
}

/**
 * What a refusal decided from the request line and headers means for the body: null (no refusal) lets the body in
 * against the budget (true). A refusal is thrown at once for a body declared larger than REFUSED_BODY_BYTES; a
 * smaller one, or a chunked one up to that size, is read first (false: the handler reaches the refusal after the
 * names in the body; a chunked body that goes on past it gets the refusal then).
 */
export function refuseBeforeBody(req: IncomingMessage, refusal: ApiError | null): boolean {
  if (refusal === null) return true;
  if (declaredLarge(req)) throw refusal;
  refusedSmall.set(req, refusal);
  return false;
}

/**
 * An error answered before the body was read. A large or chunked body is not read: the answer says
 * `connection: close`, and Node ends the connection after it (no client can make the server read, or wait for, what
 * it refused). A small one is read and dropped by Node, and the connection goes on.
 */
export function answeredBeforeBody(req: IncomingMessage, err: ApiError): ApiError {
  return declaredLarge(req) || req.headers['transfer-encoding'] !== undefined ? withClose(err) : err;
}

function withClose(err: ApiError): ApiError {
  return new ApiError(err.code, err.message, err.details, { ...err.headers, connection: 'close' });
}
