// A cap on open connections, per process and per client address, on every listener (docs/reliability.md,
// "Connections"). Without it, connections opened and held took every file descriptor under the open-files limit,
// and the server could then open no database, spawn no executor and accept nobody.
import { readFileSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Config } from './config.ts';
import type { Logger } from './log.ts';
import { connectionsClosedIdle, connectionsOpen, connectionsRefused } from './metrics.ts';
import { requestIdOf } from './raw-route.ts';
import { clientKey, trustedPeers } from './trusted-peers.ts';

/** Descriptors kept for all but client connections: stdio, listeners, executor pipes, the stores' SQLite files (and -wal, -shm), mirror, etcd and upstream pools. */
const RESERVED_FDS = 128;
/** The admin port's own connections, out of the reserve: health checks and /metrics answer while the public port is full. */
export const ADMIN_CONNECTIONS = 32;
/** What a host that says nothing is taken to allow (Linux's usual soft limit). */
const FALLBACK_FD_LIMIT = 1024;
/** Refused connections waiting to be answered 503: each holds a descriptor, so past this many a refusal is a plain close. */
const MAX_REFUSING = 32;
/** How long a refused connection may take to send the request its 503 answers. */
const REFUSE_WAIT_MS = 1000;
/** How many connections one look for an idle one passes at most (the busy ones it passes go to the back). */
const SCAN = 64;
/** At most one warning a minute: a flood of refusals must not become a flood of log lines. */
const WARN_EVERY_MS = 60_000;
/** App WebSockets one client may hold by default (MAX_WEBSOCKETS_PER_CLIENT), if under half its connections. */
const WEBSOCKETS_PER_CLIENT = 64;
/**
 * An app WebSocket that passed no byte either way for this long may be closed to make room at the total, when no HTTP
 * connection is idle; one that did is in use, as a request in flight is.
 */
export const WEBSOCKET_QUIET_MS = 5_000;
/** How often a WebSocket's last activity is noted at most (its place in the quiet order): per chunk would cost more. */
const ACTIVITY_GRAIN_MS = 1_000;
/** Connections the proxy's HTTP pool opens to a part (`serve db`, `serve account`) at most: more requests wait in it. */
export const PART_POOL_CONNECTIONS = 64;
/** The proxy's channel connections to `serve db` (src/db/channel.ts). */
export const CHANNEL_CONNECTIONS = 2;
/** Connections a cluster node's shipper opens to one peer at most (src/cluster/shipper.ts). */
export const PEER_POOL_CONNECTIONS = 8;
/**
 * What the product's own parts open to a part from one address at most (the proxy's pool and channel, a peer's
 * shipper): a part's per-client limit is never derived below it, so its own proxy, one address, is never refused there.
 */
export const PRODUCT_CONNECTIONS = PART_POOL_CONNECTIONS + CHANNEL_CONNECTIONS + PEER_POOL_CONNECTIONS;

/** The soft RLIMIT_NOFILE as this process runs with it (Node raises the soft limit to the hard one at start). */
export function openFilesLimit(): number {
  try {
    // Linux: cheap and exact. `unlimited` cannot be met on Linux (fs.nr_open bounds it); it is taken as no bound.
    const line = /^Max open files\s+(\S+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
    if (line) return line[1] === 'unlimited' ? Number.MAX_SAFE_INTEGER : Number(line[1]);
  } catch {
    // not Linux
  }
  try {
    // Elsewhere (macOS, the BSDs): the diagnostic report reads getrlimit; built once at start, never per connection.
    const soft = (process.report.getReport() as { userLimits?: { open_files?: { soft?: number | string } } }).userLimits?.open_files?.soft;
    if (soft === 'unlimited') return Number.MAX_SAFE_INTEGER;
    if (typeof soft === 'number' && soft > 0) return soft;
  } catch {
    // no report on this platform
  }
  return FALLBACK_FD_LIMIT;
}

export interface ConnectionLimits {
  /** Connections open at once on the pool's listeners (MAX_CONNECTIONS). */
  total: number;
  /** Connections open at once from one client address, or one IPv6 /64 (MAX_CONNECTIONS_PER_CLIENT). */
  perClient: number;
  /**
   * App WebSockets open at once from one client (MAX_WEBSOCKETS_PER_CLIENT): an upgraded connection is never idle
   * to the caps, so a client's WebSockets may fill no more than this of its connections.
   */
  webSocketsPerClient: number;
}

/**
 * The public listeners' limits: MAX_CONNECTIONS, else half of the open-files limit left after the reserve and the
 * admin port (a request proxied to an app or to `serve db`, or a WebSocket, holds a second descriptor upstream);
 * MAX_CONNECTIONS_PER_CLIENT, else a quarter of the total (at least four clients share it), and on a part the proxy
 * reaches (`floor`: PRODUCT_CONNECTIONS) never below what the product's own parts open to it, never above the total;
 * MAX_WEBSOCKETS_PER_CLIENT, else 64 or half of the per-client limit if that is less, never above the per-client limit.
 */
export function connectionLimits(given: Config['connections'], fdLimit = openFilesLimit(), floor = 1): ConnectionLimits & { fdLimit: number; fits: number } {
  const fits = Math.max(16, Math.floor((fdLimit - RESERVED_FDS - ADMIN_CONNECTIONS) / 2));
  const total = given.max ?? Math.min(fits, 10_000_000);
  const perClient = Math.min(total, given.maxPerClient ?? Math.max(floor, Math.floor(total / 4)));
  const webSocketsPerClient = Math.min(perClient, given.maxWebSocketsPerClient ?? Math.max(1, Math.min(WEBSOCKETS_PER_CLIENT, Math.floor(perClient / 2))));
  return { total, perClient, webSocketsPerClient, fdLimit, fits };
}

/**
 * The cap every public listener of one product shares (descriptors are the process's), with the limits logged once.
 * `reachedByProxy` (`serve db`, `serve account`): every proxied request comes from the proxy's one address, so the
 * per-client limit is derived no lower than PRODUCT_CONNECTIONS, and a start that sets it lower says so.
 */
export function publicConnections(config: Pick<Config, 'connections' | 'trustedProxies'>, logger: Logger, reachedByProxy = false): ConnectionCap {
  const limits = connectionLimits(config.connections, undefined, reachedByProxy ? PRODUCT_CONNECTIONS : 1);
  const fields = { maxConnections: limits.total, maxConnectionsPerClient: limits.perClient, maxWebSocketsPerClient: limits.webSocketsPerClient, openFilesLimit: limits.fdLimit };
  if (limits.total > limits.fits) logger.warn(fields, `MAX_CONNECTIONS is above the ${limits.fits} connections the open-files limit leaves room for: raise the limit (ulimit -n, LimitNOFILE) or lower MAX_CONNECTIONS`);
  else logger.info(fields, `connections: at most ${limits.total} open, ${limits.perClient} per client, of them ${limits.webSocketsPerClient} app WebSockets (MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT, MAX_WEBSOCKETS_PER_CLIENT)`);
  if (reachedByProxy && limits.perClient < PRODUCT_CONNECTIONS && config.trustedProxies.length === 0) {
    const name = limits.perClient < limits.total ? 'MAX_CONNECTIONS_PER_CLIENT' : 'MAX_CONNECTIONS';
    logger.warn(fields, `${name} allows ${limits.perClient} connections from one address, under the ${PRODUCT_CONNECTIONS} the proxy may open to this part from its one address: under load users get 503s the proxy relays; list the proxy's address in TRUSTED_PROXIES (held to MAX_CONNECTIONS only) or raise ${name} (docs/deploy.md)`);
  }
  return new ConnectionCap('public', limits, trustedPeers(config.trustedProxies), logger);
}

/** The admin port's cap: its own few connections, whoever holds the public ones. */
export function adminConnections(logger: Logger): ConnectionCap {
  return new ConnectionCap('admin', { total: ADMIN_CONNECTIONS, perClient: ADMIN_CONNECTIONS, webSocketsPerClient: ADMIN_CONNECTIONS }, () => false, logger);
}

type Cap = 'total' | 'per_client' | 'websockets_per_client';

const MESSAGES: Record<Cap, string> = {
  total: 'the server has too many connections open; retry in a second',
  per_client: 'this client has too many connections open to the server; close some, or retry in a second',
  websockets_per_client: 'this client has too many WebSocket connections open to the server; close some, or retry in a second',
};

/** Refused connections (of the total or per-client cap), until their request is answered or they are dropped. */
const refused = new WeakMap<Socket, Cap>();
/** The cap each watched connection counts against (an app's WebSocket proxy finds it from the socket). */
const owners = new WeakMap<Socket, ConnectionCap>();

/** SPEC 3's 503 for a request refused by `cap`. */
function refusal(req: IncomingMessage, cap: Cap): { headers: Record<string, string>; body: string } {
  const body = JSON.stringify({ error: { code: 'unavailable', message: MESSAGES[cap] } });
  return { headers: { 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(body)), 'retry-after': '1', 'x-request-id': requestIdOf(req), connection: 'close' }, body };
}

function answerUpgrade(req: IncomingMessage, socket: Duplex, cap: Cap): void {
  const answer = refusal(req, cap);
  socket.end(`HTTP/1.1 503 Service Unavailable\r\n${Object.entries(answer.headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n${answer.body}`);
}

/** For 'upgrade' listeners (they get the socket, not a response): true when the connection was refused, and then it has been answered 503. */
export function refuseUpgrade(req: IncomingMessage, socket: Duplex): boolean {
  const cap = refused.get(req.socket);
  if (cap === undefined) return false;
  answerUpgrade(req, socket, cap);
  return true;
}

/**
 * For the proxy's WebSocket upgrades to apps, after refuseUpgrade: counts the connection as its client's WebSocket
 * from now until it closes, and returns what to call when bytes pass either way (its place in the quiet order); or
 * null when the client holds MAX_WEBSOCKETS_PER_CLIENT already (TRUSTED_PROXIES peers excepted), and then the
 * upgrade has been answered 503 as a refused connection's is.
 */
export function admitWebSocket(req: IncomingMessage, socket: Duplex): (() => void) | null {
  const cap = owners.get(req.socket);
  if (cap === undefined) return () => {}; // a listener without a cap (none in the product)
  if (cap.addWebSocket(req.socket)) return () => cap.webSocketActive(req.socket);
  answerUpgrade(req, socket, 'websockets_per_client');
  return null;
}

/** Node's own marks on an HTTP server's socket: its parser (gone once upgraded) and the response in flight. */
type HttpSocket = Socket & { parser?: unknown; _httpMessage?: unknown };

/**
 * Counts the connections of the listeners it watches. At a cap, the least recently used idle connection under it
 * (no request in flight: a keep-alive between requests, or one still sending its headers) is closed to make room;
 * with none idle, the new connection is refused: its request is answered 503 `unavailable` with Retry-After.
 * Not Node's `closeIdleConnections()`: it closes every keep-alive at once, and takes a connection that has sent
 * nothing or part of its headers (the probe's) for busy.
 */
export class ConnectionCap {
  /** Every connection, least recently used first, with its client key (null: a trusted proxy, held to the total only). */
  private readonly open = new Map<Socket, string | null>();
  /** Each client's connections, least recently used first. */
  private readonly clients = new Map<string, Set<Socket>>();
  /** App WebSockets, quiet the longest first, with when they last passed a byte (to ACTIVITY_GRAIN_MS). */
  private readonly webSockets = new Map<Socket, number>();
  /** How many app WebSockets each client holds. */
  private readonly clientWebSockets = new Map<string, number>();
  private refusing = 0;
  private quietUntil = 0;
  private readonly gauge;
  private readonly name: string;
  private readonly limits: ConnectionLimits;
  private readonly trusted: (address: string | undefined) => boolean;
  private readonly logger: Logger;

  constructor(name: string, limits: ConnectionLimits, trusted: (address: string | undefined) => boolean, logger: Logger) {
    this.name = name;
    this.limits = limits;
    this.trusted = trusted;
    this.logger = logger;
    this.gauge = connectionsOpen.labels(name);
    this.gauge.inc(0);
    for (const cap of ['total', 'per_client', 'websockets_per_client']) {
      connectionsRefused.inc({ pool: name, cap }, 0);
      connectionsClosedIdle.inc({ pool: name, cap }, 0);
    }
  }

  /** Holds `server`'s connections to the caps; its request handler must call `admit` first. */
  watch(server: Server): void {
    server.on('connection', (socket: Socket) => {
      // Node takes its own 'error' listener off a socket it hands to 'connect' and 'upgrade' listeners: a client's
      // reset on one answered there (CONNECT's 400, a refused upgrade) was an uncaught error that stopped the process.
      socket.on('error', () => {});
      this.accept(socket);
    });
  }

  /** Ends every connection still open, requests in flight included (a drain past its deadline); how many there were. */
  closeAll(): number {
    const sockets = [...this.open.keys()];
    for (const s of sockets) s.destroy();
    return sockets.length;
  }

  /** False when `req` came on a refused connection: then it has been answered 503. Else notes the connection's use. */
  admit(req: IncomingMessage, res: ServerResponse): boolean {
    const cap = refused.get(req.socket);
    if (cap === undefined) {
      this.touch(req.socket);
      return true;
    }
    const answer = refusal(req, cap);
    res.writeHead(503, answer.headers);
    res.end(answer.body); // not sent to a HEAD: Node drops a HEAD response's body
    return false;
  }

  private accept(socket: Socket): void {
    const key = this.trusted(socket.remoteAddress) ? null : clientKey(socket.remoteAddress);
    const mine = key === null ? undefined : this.clients.get(key);
    if (mine && mine.size >= this.limits.perClient && !this.closeIdle(mine, 'per_client')) return this.refuse(socket, 'per_client');
    if (this.open.size >= this.limits.total && !this.closeIdle(this.open.keys(), 'total') && !this.closeQuietWebSocket()) return this.refuse(socket, 'total');
    this.open.set(socket, key);
    owners.set(socket, this);
    if (key !== null) {
      if (mine) mine.add(socket);
      else this.clients.set(key, new Set([socket]));
    }
    this.gauge.inc();
    socket.once('close', () => this.forget(socket));
  }

  /** Closes the least recently used idle connection of `sockets`, if one is found within SCAN of them. */
  private closeIdle(sockets: Iterable<Socket>, cap: Cap): boolean {
    const busy: Socket[] = [];
    let found: Socket | null = null;
    for (const s of sockets) {
      const http = s as HttpSocket;
      // Upgraded (a WebSocket, the proxy's channel to `serve db`): no parser; a request in flight: a response.
      if (http.parser && !http._httpMessage) {
        found = s;
        break;
      }
      busy.push(s);
      if (busy.length >= SCAN) break;
    }
    for (const s of busy) this.touch(s); // passed over once: the next look starts after them
    if (found === null) return false;
    connectionsClosedIdle.inc({ pool: this.name, cap });
    this.warn(cap, 'closed the least recently used idle connection');
    this.forget(found);
    found.destroy();
    return true;
  }

  /** Counts `socket` as an app WebSocket of its client; false when that client has as many as it may. */
  addWebSocket(socket: Socket): boolean {
    const key = this.open.get(socket);
    if (key === undefined) return true; // already closed
    if (this.webSockets.has(socket)) return true;
    if (key !== null) {
      const n = this.clientWebSockets.get(key) ?? 0;
      if (n >= this.limits.webSocketsPerClient) {
        connectionsRefused.inc({ pool: this.name, cap: 'websockets_per_client' });
        this.warn('websockets_per_client', 'refused a WebSocket upgrade: the client holds as many as it may');
        return false;
      }
      this.clientWebSockets.set(key, n + 1);
    }
    this.webSockets.set(socket, performance.now());
    return true;
  }

  /** Bytes passed on an app WebSocket: it goes to the back of the quiet order (at most once per ACTIVITY_GRAIN_MS). */
  webSocketActive(socket: Socket): void {
    const last = this.webSockets.get(socket);
    if (last === undefined) return;
    const now = performance.now();
    if (now - last < ACTIVITY_GRAIN_MS) return;
    this.webSockets.delete(socket);
    this.webSockets.set(socket, now);
  }

  /**
   * At the total with no HTTP connection idle: closes the app WebSocket quiet the longest, if it passed no byte for
   * WEBSOCKET_QUIET_MS (its client reconnects, as WebSocket clients do after any drop). Else they could hold every
   * slot for good, and every new client, on every route, would be refused.
   */
  private closeQuietWebSocket(): boolean {
    const first = this.webSockets.entries().next();
    if (first.done) return false;
    const [socket, last] = first.value;
    if (performance.now() - last < WEBSOCKET_QUIET_MS) return false;
    connectionsClosedIdle.inc({ pool: this.name, cap: 'total' });
    this.warn('total', 'closed the app WebSocket quiet the longest');
    this.forget(socket);
    socket.destroy();
    return true;
  }

  private refuse(socket: Socket, cap: Cap): void {
    connectionsRefused.inc({ pool: this.name, cap });
    this.warn(cap, 'refused a connection: every one under the cap has a request in flight');
    // The 503 waits for the request it answers (one sent first would reach a client not yet reading, and be lost).
    if (this.refusing >= MAX_REFUSING) {
      socket.destroy();
      return;
    }
    this.refusing++;
    refused.set(socket, cap);
    socket.once('close', () => this.refusing--);
    setTimeout(() => socket.destroy(), REFUSE_WAIT_MS).unref();
  }

  /** Moves a connection to the back: most recently used. */
  private touch(socket: Socket): void {
    const key = this.open.get(socket);
    if (key === undefined) return;
    this.open.delete(socket);
    this.open.set(socket, key);
    if (key === null) return;
    const mine = this.clients.get(key)!;
    mine.delete(socket);
    mine.add(socket);
  }

  private forget(socket: Socket): void {
    const key = this.open.get(socket);
    if (key === undefined || !this.open.delete(socket)) return;
    this.gauge.dec();
    const webSocket = this.webSockets.delete(socket);
    if (key === null) return;
    if (webSocket) {
      const n = this.clientWebSockets.get(key)! - 1;
      if (n === 0) this.clientWebSockets.delete(key);
      else this.clientWebSockets.set(key, n);
    }
    const mine = this.clients.get(key)!;
    mine.delete(socket);
    if (mine.size === 0) this.clients.delete(key);
  }

  private warn(cap: Cap, what: string): void {
    const now = performance.now();
    if (now < this.quietUntil) return;
    this.quietUntil = now + WARN_EVERY_MS;
    // Counts only: no address (the metrics count every occurrence; this says when it starts).
    const name = { total: 'MAX_CONNECTIONS', per_client: 'MAX_CONNECTIONS_PER_CLIENT', websockets_per_client: 'MAX_WEBSOCKETS_PER_CLIENT' }[cap];
    this.logger.warn({ pool: this.name, cap, open: this.open.size, webSockets: this.webSockets.size, maxConnections: this.limits.total, maxConnectionsPerClient: this.limits.perClient, maxWebSocketsPerClient: this.limits.webSocketsPerClient }, `connection cap reached (${name}): ${what}; said at most once a minute, counted in scopebase_connections_* on /metrics`);
  }
}
