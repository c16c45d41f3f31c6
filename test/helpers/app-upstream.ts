// For the SPEC 8 apps tests: the app behind the proxy (a real upstream on loopback that echoes what it got and
// answers WebSocket upgrades), the proxy started for a suite, and a raw upgrade through it.
import { after, before } from 'node:test';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type IncomingMessage, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { startAccounts, type AccountsProduct } from './accounts.ts';
import { AccountStore } from '../../src/account/store.ts';

// `=session=…` is a cookie without a name, which browsers send back as its value alone: `session=planted` (attack round 6).
const PLANTED = ['session=planted; Path=/', '__Host-session=planted; Path=/; Secure', 'scopebase-login=planted; Path=/', '=session=planted; Path=/other/', ' = scopebase-login=planted'];

export interface Upstream {
  url: string;
  /** The app's side of the upgrades to `/slow-upgrade`. */
  slowUpgrades: Duplex[];
  close(): Promise<void>;
}

function echo(req: IncomingMessage, body: string) {
  return { method: req.method, url: req.url, headers: req.headers, body };
}

async function startUpstream(): Promise<Upstream> {
  const wsSockets: Duplex[] = [];
  const slowUpgrades: Duplex[] = [];
  const upstream: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      // `/plant-session`: an app trying to set the org's session cookie (fixation), besides its own.
      res.setHeader('set-cookie', req.url!.includes('plant-session') ? ['app=1; Path=/', ...PLANTED] : 'app=1; Path=/');
      if (req.url!.includes('own-request-id')) res.setHeader('x-request-id', 'the-app-own-id');
      res.end(JSON.stringify(echo(req, body)));
    });
  });
  // A minimal WebSocket server: completes the handshake, sends one text frame with what it saw.
  upstream.on('upgrade', (req, socket) => {
    wsSockets.push(socket);
    // `/slow-upgrade`: the app takes a while to accept, as a busy one does (the client may be gone by then).
    if (req.url!.includes('slow-upgrade')) {
      slowUpgrades.push(socket);
      socket.on('error', () => {});
      socket.on('end', () => socket.destroy()); // an app closes on the proxy's FIN, as WebSocket servers do
      socket.resume();
      setTimeout(() => socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n`), 300);
      return;
    }
    const accept = createHash('sha1').update(`${req.headers['sec-websocket-key']}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
    const planted = req.url!.includes('plant-session') ? ['app=1; Path=/', ...PLANTED].map((c) => `Set-Cookie: ${c}\r\n`).join('') : '';
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n${planted}\r\n`);
    const text = Buffer.from(JSON.stringify({ url: req.url, user: req.headers['x-auth-user-id'] ?? null, prefix: req.headers['x-forwarded-prefix'] }));
    socket.write(Buffer.concat([Buffer.from([0x81, text.length]), text]));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
    slowUpgrades,
    async close() {
      upstream.closeAllConnections();
      for (const s of wsSockets) s.destroy();
      await new Promise<void>((r) => upstream.close(() => r()));
    },
  };
}

// A raw upgrade (Node's WebSocket cannot set Host, and *.localhost does not resolve here): the 101's headers and the
// first text frame.
export function upgrade(path: string, proxy: AccountsProduct, headers: Record<string, string> = {}): Promise<{ headers: IncomingHttpHeaders; message: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${proxy.url}${path}`, { headers: { host: `acme.localhost:${proxy.port}`, connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==', 'x-auth-user-id': 'usr_forged', ...headers } });
    req.on('upgrade', (res, socket, head) => {
      if (res.headers['sec-websocket-accept'] !== 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=') reject(new Error('bad handshake'));
      const onData = (buf: Buffer) => {
        resolve({ headers: res.headers, message: buf.subarray(2, 2 + buf[1]!).toString() });
        socket.destroy();
      };
      if (head.length) onData(head);
      else socket.once('data', onData);
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => reject(new Error(`no upgrade: ${res.statusCode} ${body}`)));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * The upstream, and the proxy with the account service in front of it (`acme/web` open, `acme/private` requireSession),
 * for the enclosing file or describe: started before its tests (handed to `use`), closed after them.
 */
export function appsProxyForSuite(use: (started: { upstream: Upstream; p: AccountsProduct }) => void): void {
  let upstream: Upstream | undefined;
  let p: AccountsProduct | undefined;
  before(async () => {
    upstream = await startUpstream();
    p = await startAccounts({
      APPS: JSON.stringify({ 'acme/web': `${upstream.url}/base`, 'acme/private': { url: upstream.url, requireSession: true } }),
      TRUSTED_PROXIES: '10.0.0.0/8', ACCOUNT_LOGIN_RATE_BURST: '1000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '1000',
    });
    use({ upstream, p });
  });
  after(async () => {
    await p?.close();
    await upstream?.close();
  });
}

/** A proxy behind a trusted TLS-terminating one (127.0.0.1), in front of `acme/private`; a session of `login` there. */
export async function startBehindTls(upstream: Upstream, login: string): Promise<{ q: AccountsProduct; token: string }> {
  const q = await startAccounts({ APPS: JSON.stringify({ 'acme/private': { url: upstream.url, requireSession: true } }), TRUSTED_PROXIES: '127.0.0.1' });
  try {
    const store = new AccountStore(q.config.dataDir);
    try {
      const user = store.upsertUser('dev', login, { name: null, email: 'tls@example.com', login: null, avatarUrl: null });
      return { q, token: store.createSession('acme', user.id, 3600_000).token };
    } finally {
      store.close();
    }
  } catch (e) {
    await q.close();
    throw e;
  }
}
