// The probe's second finding (docs/security.md, "Requests"): idle WebSocket upgrades to an app held their connection
// slots for good — no idle limit applied to upgraded connections, and the cap's eviction skipped them — so twenty
// from four addresses locked every new client out of every route (503) under MAX_CONNECTIONS=20. Now a WebSocket
// quiet both ways for APPS_WS_IDLE_TIMEOUT_MS is closed, one client holds at most MAX_WEBSOCKETS_PER_CLIENT, and at
// the total the WebSocket quiet the longest makes room when no HTTP connection is idle. The real product, spawned,
// on loopback, with a tiny app that answers 101.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { askFrom, metric as adminMetric, type Answer } from './helpers/ask-from.ts';
import { freePort } from './helpers/ports.ts';
import { spawnProduct, tempDir, testEnv, type SpawnedProduct } from './helpers/product.ts';


let app: Server;
/** The app's side of every WebSocket, by the path it was opened with. */
const appSockets: { path: string; socket: Socket }[] = [];

before(async () => {
  app = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"app":true}'));
  app.on('upgrade', (req, socket: Socket) => {
    appSockets.push({ path: req.url!, socket });
    socket.on('error', () => {});
    if (req.url!.includes('decline-chunked')) {
      // An app declining the upgrade with a chunked body, as most frameworks send an error page.
      socket.end('HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n');
      return;
    }
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
    if (req.url!.includes('pinging')) {
      // An app that keeps its socket alive with a ping every 200 ms (a WebSocket ping frame, empty).
      const timer = setInterval(() => socket.write(Buffer.from([0x89, 0x00])), 200);
      socket.on('close', () => clearInterval(timer));
    } else {
      socket.pipe(socket); // echo
    }
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
});
after(async () => {
  app.closeAllConnections();
  for (const { socket } of appSockets) socket.destroy();
  await new Promise<void>((r) => app.close(() => r()));
});

interface Running extends SpawnedProduct { port: number; adminPort: number }

async function start(env: Record<string, string>): Promise<Running> {
  const port = await freePort();
  const adminPort = await freePort();
  const APPS = JSON.stringify({ 'acme/site': `http://127.0.0.1:${(app.address() as AddressInfo).port}` });
  const p = await spawnProduct(testEnv(tempDir(), { PORT: String(port), ADMIN_PORT: String(adminPort), LOG_LEVEL: 'warn', APPS, ...env }));
  return { ...p, port, adminPort };
}

/** `body`: what followed the head of a refusal (a 101's frames are not kept). */
interface Ws { socket: Socket; head: string; body: string; status: number; closed: boolean; closedAt: number }

/** A raw WebSocket upgrade to the app from `from`; resolves with the answer's head (101, or a refusal). */
function upgrade(p: Running, from: string, path = '/site/live'): Promise<Ws> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port: p.port, host: '127.0.0.1', localAddress: from }, () => {
      socket.write(`GET ${path} HTTP/1.1\r\nHost: acme.localhost:${p.port}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    });
    const ws: Ws = { socket, head: '', body: '', status: 0, closed: false, closedAt: 0 };
    let text = '';
    socket.on('data', (d) => {
      if (ws.status === 101) return; // frames: read and dropped
      if (ws.status !== 0) {
        ws.body += d;
        return;
      }
      text += d;
      const end = text.indexOf('\r\n\r\n');
      if (end === -1) return;
      ws.head = text.slice(0, end);
      ws.body = text.slice(end + 4);
      ws.status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
      resolve(ws);
    });
    socket.on('close', () => {
      ws.closed = true;
      ws.closedAt = performance.now();
      if (ws.status === 0) reject(new Error(`closed before an answer: ${JSON.stringify(text)}`));
    });
    socket.on('error', () => {});
  });
}

/** One request on a new connection from `from`. */
const ask = (p: Running, path: string, opts: { from?: string; body?: unknown } = {}): Promise<Answer> => askFrom(p.port, path, opts.body, opts);
const metric = (p: Running, line: RegExp): Promise<number> => adminMetric(p.adminPort, line);

async function until(done: () => boolean, ms: number): Promise<void> {
  for (const end = performance.now() + ms; !done() && performance.now() < end;) await sleep(20);
}

const appSide = (path: string) => appSockets.filter((s) => s.path === path).map((s) => s.socket);

test('APPS_WS_IDLE_TIMEOUT_MS: a WebSocket quiet both ways is closed on both sides; one with traffic either way is kept', async () => {
  const p = await start({ APPS_WS_IDLE_TIMEOUT_MS: '1000' });
  try {
    const opened = performance.now();
    const idle = await upgrade(p, '127.0.0.1', '/site/idle');
    const talking = await upgrade(p, '127.0.0.1', '/site/talking');
    const pinged = await upgrade(p, '127.0.0.1', '/site/pinging');
    for (const ws of [idle, talking, pinged]) assert.equal(ws.status, 101, ws.head);
    // The client of `talking` sends (the app echoes) every 250 ms; `pinged`'s client sends nothing, its app pings.
    const talk = setInterval(() => talking.socket.write('x'), 250);
    try {
      await until(() => idle.closed, 4000);
      assert.ok(idle.closed, 'the idle WebSocket was closed');
      const after = idle.closedAt - opened;
      assert.ok(after >= 900 && after < 3000, `closed ${Math.round(after)} ms after it opened, for a 1000-ms limit`);
      await until(() => appSide('/site/idle').every((s) => s.destroyed), 2000);
      assert.ok(appSide('/site/idle').every((s) => s.destroyed), 'and its connection to the app too');
      await sleep(1500); // past the limit again for the others
      assert.ok(!talking.closed, 'a WebSocket whose client sends is kept');
      assert.ok(!pinged.closed, 'a WebSocket whose app pings is kept');
    } finally {
      clearInterval(talk);
    }
    await until(() => talking.closed, 4000);
    assert.ok(talking.closed, 'once its client falls silent, it is closed too');
    assert.ok(!pinged.closed);
    pinged.socket.destroy();
  } finally {
    p.killAll();
  }
});

test('an upgrade is counted and logged as any request to an app, with the status its client got (it left no trace)', async () => {
  const p = await start({ LOG_LEVEL: 'info', LOG_FORMAT: 'json' });
  try {
    const upgrades = async () => (await metric(p, /^scopebase_app_requests_total\{status="1xx"\} (\d+)/m)) || 0; // no line before the first
    const before = await upgrades();
    const ws = await upgrade(p, '127.0.0.1', '/site/logged');
    assert.equal(ws.status, 101, ws.head);
    assert.equal(await upgrades(), before + 1);
    await until(() => p.stdout().includes('"path":"/site/logged"'), 2000);
    const line = p.stdout().split('\n').find((l) => l.includes('"path":"/site/logged"'));
    assert.ok(line, 'an access-log line');
    assert.deepEqual([JSON.parse(line!).status, JSON.parse(line!).upgrade], [101, true]);
    ws.socket.destroy();
  } finally {
    p.killAll();
  }
});

test('MAX_WEBSOCKETS_PER_CLIENT: one client past it gets 503 in the cap\'s shape while another client\'s upgrade works; TRUSTED_PROXIES exempt', async () => {
  // The default: 64, or half of MAX_CONNECTIONS_PER_CLIENT if less (here 4 of 8).
  const p = await start({ MAX_CONNECTIONS: '40', MAX_CONNECTIONS_PER_CLIENT: '8', TRUSTED_PROXIES: '127.0.0.4' });
  const all: Ws[] = [];
  try {
    for (let i = 0; i < 4; i++) all.push(await upgrade(p, '127.0.0.2'));
    assert.deepEqual(all.map((ws) => ws.status), [101, 101, 101, 101]);
    const extra = await upgrade(p, '127.0.0.2');
    all.push(extra);
    assert.equal(extra.status, 503, extra.head);
    assert.match(extra.head, /\r\ncontent-type: application\/json; charset=utf-8\r\n/);
    assert.match(extra.head, /\r\nretry-after: 1\r\n/);
    assert.match(extra.head, /\r\nx-request-id: [A-Za-z0-9._:@-]{8,}\r\n/);
    await until(() => extra.closed, 2000);
    assert.deepEqual(JSON.parse(extra.body), { error: { code: 'unavailable', message: 'this client has too many WebSocket connections open to the server; close some, or retry in a second' } });
    const other = await upgrade(p, '127.0.0.3');
    all.push(other);
    assert.equal(other.status, 101, 'another client\'s upgrade works');
    assert.equal((await ask(p, '/web/_db/execute', { from: '127.0.0.2', body: { sql: 'SELECT 1' } })).status, 200, 'the client keeps room for its requests');
    for (let i = 0; i < 6; i++) all.push(await upgrade(p, '127.0.0.4'));
    assert.deepEqual(all.slice(-6).map((ws) => ws.status), [101, 101, 101, 101, 101, 101], 'a trusted proxy is held to the total only');
    all[0]!.socket.destroy();
    await sleep(200);
    const again = await upgrade(p, '127.0.0.2');
    all.push(again);
    assert.equal(again.status, 101, 'one closed, one more may open');
    assert.equal(await metric(p, /^scopebase_connections_refused_total\{pool="public",cap="websockets_per_client"\}/), 1);
  } finally {
    for (const ws of all) ws.socket.destroy();
    p.killAll();
  }
});

test('the probe: 20 idle WebSockets from four addresses at MAX_CONNECTIONS=20, MAX_CONNECTIONS_PER_CLIENT=5 lock nobody out', async () => {
  const p = await start({ MAX_CONNECTIONS: '20', MAX_CONNECTIONS_PER_CLIENT: '5' });
  const all: Ws[] = [];
  try {
    for (let i = 0; i < 20; i++) all.push(await upgrade(p, `127.0.0.${2 + Math.floor(i / 5)}`));
    await sleep(200);
    // A new client, on an app, the database API and an account route.
    const db = await ask(p, '/web/_db/execute', { body: { sql: 'SELECT 1' } });
    assert.equal(db.status, 200, JSON.stringify(db.json));
    const site = await ask(p, '/site/');
    assert.equal(site.status, 200, JSON.stringify(site.json));
    const verify = await ask(p, '/web/_account/verify');
    assert.equal(verify.status, 401, JSON.stringify(verify.json));
    assert.equal(all.filter((ws) => ws.status === 101).length, 8, 'two WebSockets per address (half of 5), the rest refused');
    const refused = all.filter((ws) => ws.status === 503);
    await until(() => refused.every((ws) => ws.closed), 2000);
    for (const ws of refused) assert.equal(JSON.parse(ws.body).error.message, 'this client has too many WebSocket connections open to the server; close some, or retry in a second');
  } finally {
    for (const ws of all) ws.socket.destroy();
    p.killAll();
  }
});

test('at MAX_CONNECTIONS with no HTTP connection idle, the WebSocket quiet the longest makes room; one in use is kept', async () => {
  // Each address may hold five WebSockets here, so twenty fill the total.
  const p = await start({ MAX_CONNECTIONS: '20', MAX_CONNECTIONS_PER_CLIENT: '5', MAX_WEBSOCKETS_PER_CLIENT: '5' });
  const all: Ws[] = [];
  try {
    for (let i = 0; i < 20; i++) all.push(await upgrade(p, `127.0.0.${2 + Math.floor(i / 5)}`));
    assert.equal(all.filter((ws) => ws.status === 101).length, 20);
    // The oldest is in use (its client sends every 400 ms); the others are quiet past 5 s (WEBSOCKET_QUIET_MS).
    const talk = setInterval(() => all[0]!.socket.write('x'), 400);
    try {
      await sleep(5600);
      const db = await ask(p, '/web/_db/execute', { body: { sql: 'SELECT 1' } });
      assert.equal(db.status, 200, JSON.stringify(db.json));
      await until(() => all.some((ws) => ws.closed), 2000);
      assert.deepEqual(all.flatMap((ws, i) => (ws.closed ? [i] : [])), [1], 'the quiet one opened first was closed, not the one in use');
      assert.equal(await metric(p, /^scopebase_connections_closed_idle_total\{pool="public",cap="total"\}/), 1);
    } finally {
      clearInterval(talk);
    }
  } finally {
    for (const ws of all) ws.socket.destroy();
    p.killAll();
  }
});

test('an app declining an upgrade with a chunked answer: its client reads the status and the whole body (it got chunked framing around an unchunked body)', async (t) => {
  const p = await start({});
  t.after(() => p.killAll());
  const answer = await new Promise<{ status: number; body: string; te: string | undefined }>((resolve, reject) => {
    const req = httpRequest({ port: p.port, host: '127.0.0.1', path: '/site/decline-chunked', headers: { host: `acme.localhost:${p.port}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' } });
    req.on('upgrade', () => reject(new Error('the app declined: no 101 was to come')));
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, body, te: res.headers['transfer-encoding'] }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
  assert.equal(answer.status, 403);
  assert.equal(answer.body, 'hello world');
});
