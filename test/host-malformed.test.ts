// A malformed Host (a port outside 1..65535, an empty port, userinfo, unmatched IPv6 brackets, ...) is 400
// invalid_request on every listener that reads the org from Host: the proxy (Fastify and raw routes, WebSocket
// upgrades), the account service alone and the reference mirror. It never reaches a page or a redirect URL. A
// well-formed host that is no org's is 404 unknown_host, suggesting an address that listener serves.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { startProduct, type Product } from './helpers/product.ts';
import { newSecret } from './helpers/mirror.ts';

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

/** One request written by hand (a client library may refuse or rewrite such a Host): status, headers, body. */
function raw(url: string, head: string, body = ''): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.write(`${head}Connection: close\r\n\r\n${body}`));
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (d) => (text += d));
    socket.on('error', reject);
    socket.on('close', () => {
      const [top, ...rest] = text.split('\r\n\r\n');
      const lines = (top ?? '').split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      resolve({ status: Number(lines[0]?.split(' ')[1]), headers, body: rest.join('\r\n\r\n') });
    });
  });
}

const MALFORMED: [string, RegExp][] = [
  ['acme.localhost:99999999', /port must be a number from 1 to 65535/],
  ['acme.localhost:65536', /port must be/],
  ['acme.localhost:0', /port must be/],
  ['acme.localhost:', /port must be/],
  ['acme.localhost:80a', /port must be/],
  ['acme.localhost:+80', /port must be/],
  ['acme.localhost:0000000080', /port must be/],
  ['acme.localhost:80:80', /only one port/],
  ['user@acme.localhost', /user information/],
  ['user:pw@acme.localhost:8080', /user information/],
  ['[::1', /"\[" without "\]"/],
  ['::1]', /"\]" without "\["/],
  ['acme.localhost]', /"\]" without "\["/],
  ['[::1]x', /only a port may follow/],
  ['[acme.localhost]', /not an IPv6 address/],
  [':8080', /no host name/],
  ['acme.localhost/web', /a character no host name has/],
  ['acme.local host', /a character no host name has/],
];

let p: Product;
let alone: Product;
before(async () => {
  p = await startProduct({ MIRROR_PORT: '0', MIRROR_SECRET: newSecret(), APPS: JSON.stringify({ 'acme/app': 'http://127.0.0.1:9' }) });
  alone = await startProduct({}, 'account');
});
after(async () => {
  await p.close();
  await alone.close();
});

function assertRefused(r: { status: number; headers: Record<string, string>; body: string }, host: string, message: RegExp, html: boolean): void {
  assert.equal(r.status, 400, `${host}: ${r.body}`);
  assert.ok(r.headers['x-request-id'], 'x-request-id');
  assert.equal(r.headers.location, undefined, 'no redirect carries the Host');
  if (html) {
    assert.match(r.headers['content-type'] ?? '', /^text\/html/, host);
    assert.match(r.body, /<code>invalid_request<\/code>/);
    assert.match(r.body, /is malformed: /);
    return;
  }
  assert.match(r.headers['content-type'] ?? '', /^application\/json/, host);
  const json = JSON.parse(r.body);
  assert.equal(json.error.code, 'invalid_request', host);
  assert.match(json.error.message, /^Host ".*" is malformed: /, host);
  assert.match(json.error.message, message, host);
}

describe('a malformed Host is 400 invalid_request', () => {
  for (const [host, message] of MALFORMED) {
    test(host, async () => {
      const proxy = p.url;
      const cases: [string, string, string, boolean][] = [
        // [listener, request line and headers, what for, HTML?]
        [proxy, 'GET /web/_account/login HTTP/1.1\r\n', 'the sign-in redirect', false],
        [proxy, `GET /web/_account/login HTTP/1.1\r\nAccept: ${BROWSER}\r\n`, 'the sign-in page, to a browser', true],
        [proxy, `GET /web/ HTTP/1.1\r\nAccept: ${BROWSER}\r\n`, 'a landing page, to a browser', true],
        [proxy, 'POST /web/_db/query HTTP/1.1\r\nContent-Length: 2\r\n', 'the raw /_db route', false],
        [proxy, `POST /web/_db/query?x HTTP/1.1\r\nAccept: ${BROWSER}\r\nContent-Length: 2\r\n`, '/_db answers JSON even to a browser', false],
        [proxy, 'GET /web/_account/verify HTTP/1.1\r\n', 'the raw forward-auth check', false],
        [proxy, 'GET /app/ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n', 'a WebSocket upgrade to an app', false],
        [alone.url, 'GET /web/_account/login HTTP/1.1\r\n', 'the account service alone', false],
        [alone.url, `GET /web/_account/ HTTP/1.1\r\nAccept: ${BROWSER}\r\n`, 'the account service alone, to a browser', true],
        [alone.url, 'GET /verify HTTP/1.1\r\n', '{account_url}/verify', false],
        [p.running.mirrorUrl!, 'POST /web/_db/query HTTP/1.1\r\nContent-Length: 2\r\n', 'the reference mirror', false],
      ];
      for (const [url, head, what, html] of cases) {
        const r = await raw(url, `${head}Host: ${host}\r\n`);
        assert.doesNotThrow(() => assertRefused(r, host, message, html), `${what}: ${r.status} ${r.body.slice(0, 300)}`);
      }
    });
  }
});

test('well-formed hosts keep their answers: any port 1..65535, an IPv6 literal is no org (404 unknown_host)', async () => {
  for (const host of ['acme.localhost:65535', 'acme.localhost:1', 'ACME.localhost:08080', 'acme.localhost']) {
    const r = await raw(p.url, `GET /web/_account/login HTTP/1.1\r\nHost: ${host}\r\n`);
    assert.equal(r.status, 302, `${host}: ${r.body}`);
    assert.equal(new URL(r.headers.location!).searchParams.get('redirect_uri'), `http://${host}/web/_account/callback`);
  }
  for (const url of [p.url, alone.url]) {
    const r = await raw(url, 'GET /web/_account/login HTTP/1.1\r\nHost: [::1]:8080\r\n');
    assert.equal(r.status, 404, r.body);
    assert.equal(JSON.parse(r.body).error.code, 'unknown_host');
  }
});

test('a host that is no org\'s: each listener\'s unknown_host suggests an address it serves', async () => {
  const suggestion = async (url: string, head: string): Promise<string> => {
    const port = new URL(url).port;
    const r = await raw(url, `${head}Host: 127.0.0.1:${port}\r\n`);
    assert.equal(r.status, 404, r.body);
    const { error } = JSON.parse(r.body);
    assert.equal(error.code, 'unknown_host');
    const address = /e\.g\. (http:\/\/\S+)/.exec(error.message)?.[1];
    assert.ok(address, error.message);
    assert.equal(new URL(address).port, port, 'on the port the caller used');
    return address;
  };
  const mirror = p.running.mirrorUrl!;
  const head = 'POST /web/_db/query HTTP/1.1\r\nContent-Length: 2\r\n';
  const toMirror = await suggestion(mirror, head);
  assert.equal(new URL(toMirror).pathname, '/web/_db/query', 'the mirror serves no /_account/ page');
  // Followed (a POST, as the message says), the suggestion reaches a route of the mirror: a secret is asked for.
  const followed = await raw(mirror, `POST ${new URL(toMirror).pathname} HTTP/1.1\r\nHost: ${new URL(toMirror).host}\r\nContent-Length: 2\r\n`, '{}');
  assert.equal(JSON.parse(followed.body).error.code, 'unauthorized', followed.body);
  const account = await raw(mirror, `GET /web/_account/ HTTP/1.1\r\nHost: acme.localhost:${new URL(mirror).port}\r\n`);
  assert.equal(account.status, 404, 'what the message suggested before');
  // The proxy and the account service alone serve the account page they suggest.
  for (const url of [p.url, alone.url]) {
    const page = new URL(await suggestion(url, 'GET /web/_account/ HTTP/1.1\r\n'));
    assert.equal(page.pathname, '/web/_account/');
    assert.equal((await raw(url, `GET ${page.pathname} HTTP/1.1\r\nHost: ${page.host}\r\n`)).status, 200);
  }
});
