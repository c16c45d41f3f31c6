// The probe's finding (docs/reliability.md, "Connections"): connections opened and held took every file descriptor,
// and then the server could open no database, executor or connection. MAX_CONNECTIONS caps them per process,
// MAX_CONNECTIONS_PER_CLIENT per client address; idle ones make room first, else a new one gets 503.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../src/shared/config.ts';
import { connectionLimits, openFilesLimit, PRODUCT_CONNECTIONS } from '../src/shared/connection-cap.ts';
import { clientKey } from '../src/shared/trusted-peers.ts';
import { askFrom as ask, metric as adminMetric, type Answer } from './helpers/ask-from.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { freePort } from './helpers/ports.ts';
import { ROOT_KEY, spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';

const metric = (p: Running, line: RegExp): Promise<number> => adminMetric(p.adminPort, line);
const SECRET = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');

interface Running extends SpawnedProduct { port: number; adminPort: number }

async function start(env: Record<string, string>, openFiles?: number): Promise<Running> {
  const port = await freePort();
  const adminPort = await freePort();
  const p = await spawnProduct(testEnv(tempDir(), { PORT: String(port), ADMIN_PORT: String(adminPort), LOG_LEVEL: 'warn', ...env }), ['start'], { openFiles });
  return { ...p, port, adminPort };
}

interface Held { socket: Socket; closed: boolean }

/**
 * A connection held open from `from`: `idle` sends nothing, `slow` part of its headers, `busy` its headers and part
 * of a body (a request in flight). Resolves once connected and written.
 */
function hold(port: number, kind: 'idle' | 'slow' | 'busy', from = '127.0.0.1'): Promise<Held> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress: from });
    const held: Held = { socket, closed: false };
    socket.on('close', () => (held.closed = true));
    socket.on('error', () => {}); // a connection closed by the server may reset
    socket.once('connect', () => {
      if (kind === 'slow') socket.write('GET /web/_db/status HTTP/1.1\r\nHost: acme.localhost\r\nX-Slow: ');
      if (kind === 'busy') socket.write(`POST /web/_db/query HTTP/1.1\r\nHost: acme.localhost\r\nAuthorization: Bearer ${SECRET}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"sql":`);
      resolve(held);
    });
    socket.once('error', reject);
  });
}


/**
 * Waits until the server has taken in what was sent to it (a round trip through its event loop, on the admin port),
 * then until `done` holds on this side (a closed connection is seen here a moment later).
 */
async function settle(p: Running, done: () => boolean = () => true): Promise<void> {
  await fetch(`http://127.0.0.1:${p.adminPort}/healthz`);
  for (const until = performance.now() + 5000; !done() && performance.now() < until;) await sleep(20);
  await sleep(50);
}

const closed = (held: Held[]) => held.filter((h) => h.closed).length;

function assertRefused(r: Answer, why: RegExp): void {
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.equal(r.json.error.code, 'unavailable');
  assert.match(r.json.error.message, why);
  assert.equal(r.headers['retry-after'], '1');
  assert.match(String(r.headers['content-type']), /^application\/json/);
  assert.match(String(r.headers['x-request-id']), /^[A-Za-z0-9._:@-]{8,}$/);
}

test('past MAX_CONNECTIONS, idle and slow-header connections are closed least recently used first, and a request gets through', async () => {
  const p = await start({ MAX_CONNECTIONS: '8', MAX_CONNECTIONS_PER_CLIENT: '8' });
  try {
    assert.equal((await ask(p.port, '/web/_db/execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    const held: Held[] = [];
    for (let i = 0; i < 12; i++) {
      // One after another (the server takes them in that order), from three clients: none at its own cap.
      held.push(await hold(p.port, i % 2 ? 'slow' : 'idle', `127.0.0.${10 + (i % 3)}`));
    }
    await settle(p, () => closed(held) >= 4);
    assert.deepEqual(held.map((h) => h.closed), [true, true, true, true, false, false, false, false, false, false, false, false], 'the four oldest were closed, eight stay');
    const r = await ask(p.port, '/web/_db/query', { sql: 'SELECT count(*) AS n FROM t' });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    await settle(p, () => closed(held) >= 5);
    assert.equal(closed(held), 5, 'and one more for the request');
    assert.equal(await metric(p, /^scopebase_connections_closed_idle_total\{pool="public",cap="total"\}/), 5);
    assert.equal(await metric(p, /^scopebase_connections_refused_total\{pool="public",cap="total"\}/), 0);
    assert.ok(await metric(p, /^scopebase_connections_open\{pool="public"\}/) <= 8);
    const warnings = p.stdout().split('\n').filter((l) => l.includes('connection cap reached'));
    assert.equal(warnings.length, 1, `one warning, however often the cap is hit:\n${warnings.join('\n')}`);
    assert.doesNotMatch(warnings[0]!, /127\.0\.0\.1|Bearer/, 'no address or secret in it');
    for (const h of held) h.socket.destroy();
  } finally {
    p.killAll();
  }
});

test('with every connection busy, one more gets 503 unavailable with Retry-After in SPEC 3\'s shape; served again once they finish', async () => {
  const p = await start({ MAX_CONNECTIONS: '4', MAX_CONNECTIONS_PER_CLIENT: '4' });
  try {
    assert.equal((await ask(p.port, '/web/_db/execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    const busy = await Promise.all(Array.from({ length: 4 }, (_, i) => hold(p.port, 'busy', `127.0.0.${10 + i}`)));
    await settle(p);
    assertRefused(await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }), /the server has too many connections/);
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { method: 'HEAD' })).status, 503, 'HEAD too, without a body');
    assert.ok(busy.every((h) => !h.closed), 'a request in flight is never closed to make room');
    for (const h of busy) h.socket.destroy();
    await settle(p);
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' })).status, 200);
    assert.equal(await metric(p, /^scopebase_connections_refused_total\{pool="public",cap="total"\}/), 2);
  } finally {
    p.killAll();
  }
});

test('one client past MAX_CONNECTIONS_PER_CLIENT is refused, or loses its own idle connections; other clients are served', async () => {
  const p = await start({ MAX_CONNECTIONS: '32', MAX_CONNECTIONS_PER_CLIENT: '3' });
  try {
    assert.equal((await ask(p.port, '/web/_db/execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    const busy = await Promise.all(Array.from({ length: 3 }, () => hold(p.port, 'busy', '127.0.0.1')));
    await settle(p);
    assertRefused(await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.1' }), /this client/);
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.2' })).status, 200, 'another address is served');
    const idle: Held[] = [];
    for (let i = 0; i < 3; i++) {
      idle.push(await hold(p.port, 'idle', '127.0.0.3'));
    }
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.3' })).status, 200, 'a client at its cap with idle connections is served');
    await settle(p, () => closed(idle) >= 1);
    assert.deepEqual(idle.map((h) => h.closed), [true, false, false], 'its own least recently used idle connection made room');
    assert.ok(busy.every((h) => !h.closed));
    assert.equal(await metric(p, /^scopebase_connections_refused_total\{pool="public",cap="per_client"\}/), 1);
    assert.equal(await metric(p, /^scopebase_connections_closed_idle_total\{pool="public",cap="per_client"\}/), 1);
    for (const h of [...busy, ...idle]) h.socket.destroy();
  } finally {
    p.killAll();
  }
});

test('a TRUSTED_PROXIES peer (the load balancer all users come through) is held to MAX_CONNECTIONS only', async () => {
  const p = await start({ TRUSTED_PROXIES: '127.0.0.1', MAX_CONNECTIONS: '8', MAX_CONNECTIONS_PER_CLIENT: '2' });
  try {
    assert.equal((await ask(p.port, '/web/_db/execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    const held = await Promise.all(Array.from({ length: 6 }, () => hold(p.port, 'busy', '127.0.0.1')));
    await settle(p);
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.1' })).status, 200, 'the 7th connection of the trusted peer');
    held.push(...await Promise.all(Array.from({ length: 2 }, () => hold(p.port, 'busy', '127.0.0.2'))));
    await settle(p);
    assertRefused(await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.2' }), /this client/);
    assertRefused(await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.1' }), /the server has too many/);
    assert.ok(held.every((h) => !h.closed));
    for (const h of held) h.socket.destroy();
    await settle(p);
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' }, { from: '127.0.0.1' })).status, 200);
  } finally {
    p.killAll();
  }
});

test('a WebSocket to an app is in use, never closed to make room; an upgrade on a refused connection gets the 503 too', async () => {
  // The app echoes what its WebSocket receives.
  const app = createServer().on('upgrade', (_req, socket: Socket) => {
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
    socket.pipe(socket);
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const p = await start({ MAX_CONNECTIONS: '4', MAX_CONNECTIONS_PER_CLIENT: '4', APPS: JSON.stringify({ 'acme/site': `http://127.0.0.1:${(app.address() as AddressInfo).port}` }) });
  const upgrade = (from: string) => new Promise<{ socket: Socket; head: string }>((resolve, reject) => {
    const socket = connect({ port: p.port, host: '127.0.0.1', localAddress: from }, () => {
      socket.write(`GET /site/live HTTP/1.1\r\nHost: acme.localhost:${p.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    });
    let text = '';
    socket.on('data', (d) => {
      text += d;
      if (text.includes('\r\n\r\n')) resolve({ socket, head: text });
    });
    socket.on('error', reject);
  });
  try {
    const ws = await upgrade('127.0.0.1');
    assert.match(ws.head, /^HTTP\/1\.1 101/);
    const idle: Held[] = [];
    for (let i = 0; i < 6; i++) {
      idle.push(await hold(p.port, 'idle', `127.0.0.${10 + (i % 2)}`));
    }
    await settle(p, () => closed(idle) >= 3);
    assert.equal(idle.filter((h) => !h.closed).length, 3, 'the idle ones made room for each other');
    const echoed = new Promise<string>((resolve) => ws.socket.once('data', (d) => resolve(String(d))));
    ws.socket.write('still here');
    assert.equal(await echoed, 'still here', 'the WebSocket was left open');
    for (const h of idle) h.socket.destroy();
    const busy = await Promise.all(Array.from({ length: 3 }, (_, i) => hold(p.port, 'busy', `127.0.0.${10 + i}`)));
    await settle(p);
    const refused = await upgrade('127.0.0.5');
    assert.match(refused.head, /^HTTP\/1\.1 503 /);
    assert.match(refused.head, /retry-after: 1\r\n/);
    assert.match(refused.head, /x-request-id: /);
    refused.socket.destroy();
    for (const h of busy) h.socket.destroy();
    ws.socket.destroy();
  } finally {
    p.killAll();
    app.close();
  }
});

test('the probe: under ulimit -n 256, 400 idle and slow connections leave the server answering queries and opening databases', async () => {
  // No MAX_CONNECTIONS: the cap is derived from the open-files limit the process runs under.
  const p = await start({}, 256);
  try {
    assert.equal((await ask(p.port, '/web/_db/execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    const held: Held[] = [];
    for (let i = 0; i < 400; i += 50) {
      // From eight addresses: past each one's own cap and past the total.
      held.push(...await Promise.all(Array.from({ length: 50 }, (_, j) => hold(p.port, (i + j) % 4 === 3 ? 'slow' : 'idle', `127.0.0.${20 + (j % 8)}`))));
    }
    await settle(p);
    const q = await ask(p.port, '/web/_db/query', { sql: 'SELECT count(*) AS n FROM t' }, { timeoutMs: 5000 }).catch((e) => assert.fail(`a query after the flood: ${e.message}`));
    assert.equal(q.status, 200, JSON.stringify(q.json));
    const fresh = await ask(p.port, '/web/_db/execute', { database: 'fresh', sql: 'CREATE TABLE u(y)' }, { timeoutMs: 5000 });
    assert.equal(fresh.status, 200, `a new database file: ${JSON.stringify(fresh.json)}`);
    const fds = readdirSync(`/proc/${p.child.pid}/fd`).length;
    assert.ok(fds < 160, `the server holds ${fds} descriptors of its 256`);
    const open = held.filter((h) => !h.closed).length;
    assert.ok(open <= 48, `${open} of the 400 are still open: the derived cap is (256 - 128 - 32) / 2 = 48`);
    assert.equal(await metric(p, /^scopebase_connections_open\{pool="public"\}/), open);
    assert.doesNotMatch(p.stdout() + p.stderr(), /EMFILE/);
    for (const h of held) h.socket.destroy();
    assert.equal((await ask(p.port, '/web/_db/query', { sql: 'SELECT 1' })).status, 200);
  } finally {
    p.killAll();
  }
});

test('the defaults: from the open-files limit, a quarter of it per client; IPv6 clients counted by their /64; bad values named', () => {
  const unset = { max: null, maxPerClient: null, maxWebSocketsPerClient: null };
  assert.deepEqual(connectionLimits(unset, 256), { total: 48, perClient: 12, webSocketsPerClient: 6, fdLimit: 256, fits: 48 });
  assert.deepEqual(connectionLimits(unset, 20_000), { total: 9920, perClient: 2480, webSocketsPerClient: 64, fdLimit: 20_000, fits: 9920 });
  assert.deepEqual(connectionLimits({ ...unset, max: 100 }, 20_000), { total: 100, perClient: 25, webSocketsPerClient: 12, fdLimit: 20_000, fits: 9920 });
  assert.equal(connectionLimits({ ...unset, maxPerClient: 1_000_000 }, 1024).perClient, 432, 'never above the total');
  assert.equal(connectionLimits({ ...unset, maxWebSocketsPerClient: 1_000_000 }, 1024).webSocketsPerClient, 108, 'never above the per-client limit');
  assert.equal(connectionLimits({ ...unset, max: 20, maxPerClient: 5, maxWebSocketsPerClient: 5 }).webSocketsPerClient, 5, 'as set, up to the per-client limit');
  assert.equal(connectionLimits({ ...unset, max: 4, maxPerClient: 1 }).webSocketsPerClient, 1);
  // A part the proxy reaches (serve db, serve account): never derived below what the product's own parts open to it.
  assert.equal(connectionLimits({ ...unset, max: 120 }, 20_000, PRODUCT_CONNECTIONS).perClient, PRODUCT_CONNECTIONS);
  assert.equal(connectionLimits({ ...unset, max: 40 }, 20_000, PRODUCT_CONNECTIONS).perClient, 40, 'never above the total');
  assert.equal(connectionLimits({ ...unset, max: 120, maxPerClient: 10 }, 20_000, PRODUCT_CONNECTIONS).perClient, 10, 'as set');
  assert.ok(openFilesLimit() > 0);
  assert.equal(clientKey('::ffff:192.0.2.7'), '192.0.2.7');
  assert.equal(clientKey('2001:db8:1:2:aaaa::1'), clientKey('2001:0db8:0001:0002:ffff:1:2:3'));
  assert.notEqual(clientKey('2001:db8:1:2::1'), clientKey('2001:db8:1:3::1'));
  assert.equal(clientKey('::1'), '0:0:0:0::/64');
  const env = (more: Record<string, string>) => testEnv(tempDir(), more);
  assert.throws(() => loadConfig(env({ MAX_CONNECTIONS: 'many' })), /MAX_CONNECTIONS: must be a whole number/);
  assert.throws(() => loadConfig(env({ MAX_CONNECTIONS: '0' })), /MAX_CONNECTIONS: must be between 1/);
  assert.throws(() => loadConfig(env({ MAX_CONNECTIONS: '10', MAX_CONNECTIONS_PER_CLIENT: '11' })), /MAX_CONNECTIONS_PER_CLIENT: must not be above MAX_CONNECTIONS/);
  assert.deepEqual(loadConfig(env({ MAX_CONNECTIONS: '10', MAX_CONNECTIONS_PER_CLIENT: '' })).connections, { max: 10, maxPerClient: null, maxWebSocketsPerClient: null });
  assert.throws(() => loadConfig(env({ MAX_CONNECTIONS_PER_CLIENT: '10', MAX_WEBSOCKETS_PER_CLIENT: '11' })), /MAX_WEBSOCKETS_PER_CLIENT: must not be above MAX_CONNECTIONS_PER_CLIENT/);
  assert.throws(() => loadConfig(env({ MAX_WEBSOCKETS_PER_CLIENT: '0' })), /MAX_WEBSOCKETS_PER_CLIENT: must be between 1/);
  assert.equal(loadConfig(env({})).appsWsIdleTimeoutMs, 120_000);
  assert.throws(() => loadConfig(env({ APPS_WS_IDLE_TIMEOUT_MS: '2m' })), /APPS_WS_IDLE_TIMEOUT_MS: must be a whole number/);
});
