// Issue 11 item 6: malformed HTTP gets SPEC 3's error shape and an x-request-id on every listener (the proxy, the
// reference mirror, the admin port; `serve db` and `serve account` build their listener the same way).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { request } from 'undici';
import { startProduct, type Product } from './helpers/product.ts';
import { newSecret } from './helpers/mirror.ts';

/** Writes raw bytes to a listener and reads everything it answers until it closes. */
function raw(url: string, bytes: string | Buffer): Promise<{ status: number; headers: Record<string, string>; body: string }> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.end(bytes));
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => (text += d));
    socket.on('error', reject);
    socket.on('close', () => {
      const [head, ...rest] = text.split('\r\n\r\n');
      const lines = (head ?? '').split('\r\n');
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      resolve({ status: Number(lines[0]?.split(' ')[1]), headers, body: rest.join('\r\n\r\n') });
    });
  });
}

let p: Product;
before(async () => {
  const secret = newSecret();
  p = await startProduct({ MIRROR_PORT: '0', MIRROR_SECRET: secret });
});
after(() => p.close());

const host = 'Host: acme.localhost\r\n';
const cases: [string, string | Buffer, number, RegExp][] = [
  // Each error Node's HTTP parser (llhttp) raises for a request, named for what it is.
  ['a garbage request line', 'HELLO\r\n\r\n', 400, /request line is malformed: the method/],
  ['a lowercase method', `get / HTTP/1.1\r\n${host}\r\n`, 400, /the method is not one HTTP defines/],
  ['raw bytes >= 0x80 in the target', Buffer.concat([Buffer.from('GET /web/\xff\xfe HTTP/1.1\r\n', 'latin1'), Buffer.from(host + '\r\n')]), 400, /target holds a character HTTP does not allow/],
  ['a control character in the target', `GET /web/\x01 HTTP/1.1\r\n${host}\r\n`, 400, /target holds a character HTTP does not allow/],
  ['a space in the target', `GET /web/a b HTTP/1.1\r\n${host}\r\n`, 400, /request line is malformed: expected METHOD \/path HTTP\/1\.1/],
  ['an unknown HTTP version', `GET / HTTP/1.x\r\n${host}\r\n`, 400, /HTTP version is not 1\.0 or 1\.1/],
  ['a request line ending in LF alone', `GET / HTTP/1.1\n${host}\n`, 400, /request line does not end with CRLF/],
  ['HTTP/2 with prior knowledge', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 505, /HTTP\/2 is not served/],
  ['a space in a header name', `GET / HTTP/1.1\r\n${host}Bad Header: x\r\n\r\n`, 400, /header is malformed: its name/],
  ['a header line without a colon', `GET / HTTP/1.1\r\n${host}NoColon\r\n\r\n`, 400, /header is malformed: its name/],
  ['a control character in a header value', `GET / HTTP/1.1\r\n${host}X-A: a\x01b\r\n\r\n`, 400, /header is malformed: its value holds a control character/],
  ['a header folded onto a second line', `GET / HTTP/1.1\r\n${host}X-A: b\r\n c\r\n\r\n`, 400, /header is malformed: it is folded/],
  ['a header line ending in LF alone', `GET / HTTP/1.1\r\n${host}X-A: b\n\r\n`, 400, /does not end with CRLF/],
  ['a bare CR in a header value', `GET / HTTP/1.1\r\n${host}X-A: b\rc\r\n\r\n`, 400, /does not end with CRLF/],
  // Request smuggling's shape: RFC 9112 6.3 says a server may refuse it, and Node does, in either order.
  ['Content-Length and Transfer-Encoding together', `POST /web/_db/status HTTP/1.1\r\n${host}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, 400, /^both Content-Length and Transfer-Encoding were sent/],
  ['Transfer-Encoding and Content-Length together', `POST /web/_db/status HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n`, 400, /^both Content-Length and Transfer-Encoding were sent/],
  ['Content-Length with Transfer-Encoding: gzip', `POST /web/_db/status HTTP/1.1\r\n${host}Transfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}`, 400, /^both Content-Length and Transfer-Encoding were sent/],
  ['two different Content-Lengths', `POST /web/_db/status HTTP/1.1\r\n${host}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}`, 400, /^Content-Length is sent more than once/],
  ['a negative Content-Length', `POST /web/_db/status HTTP/1.1\r\n${host}Content-Length: -1\r\n\r\n`, 400, /^Content-Length is not a whole number/],
  ['a Content-Length past 64 bits', `POST /web/_db/status HTTP/1.1\r\n${host}Content-Length: 99999999999999999999999\r\n\r\n`, 400, /^Content-Length is not a whole number/],
  ['a 20 KiB header', `GET / HTTP/1.1\r\n${host}X-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`, 431, /over 16 KiB/],
  ['3,000 headers', `GET / HTTP/1.1\r\n${host}${'X: y\r\n'.repeat(3000)}\r\n`, 431, /over 16 KiB/],
  ['a 78 KB URL', `GET /${'a'.repeat(78 * 1000)} HTTP/1.1\r\n${host}\r\n`, 431, /over 16 KiB/],
  ['an undecodable URL', `POST /web%FF/_db/status HTTP/1.1\r\n${host}Content-Length: 0\r\n\r\n`, 400, /percent-encoded|invalid/],
  // RFC 9112 3.2: a front proxy picking the other Host would route to one org while this serves another.
  ['two Host headers', `POST /web/_db/status HTTP/1.1\r\n${host}Host: globex.localhost\r\nContent-Length: 2\r\n\r\n{}`, 400, /more than one Host/],
  ['an absolute-form target naming another host', `POST http://globex.localhost/web/_db/status HTTP/1.1\r\n${host}Content-Length: 2\r\n\r\n{}`, 400, /another host/],
  ['HTTP/1.1 without Host', 'GET /web/_db/status HTTP/1.1\r\nConnection: close\r\n\r\n', 404, /host/i],
  ['the headers cut short', `GET / HTTP/1.1\r\n${host}X-A: b`, 400, /connection ended before the whole request was received/],
  // The parser takes these headers and fails on the body: the request is in flight, and was answered by a reset.
  ['Transfer-Encoding: gzip', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n`, 400, /Transfer-Encoding is malformed: a request's must end with chunked/],
  ['Transfer-Encoding: identity', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: identity\r\n\r\n`, 400, /Transfer-Encoding is malformed/],
  ['Transfer-Encoding: chunked, gzip', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n`, 400, /Transfer-Encoding is malformed/],
  ['a bad chunk size', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\nzz\r\n\r\n`, 400, /chunked body is malformed: a chunk size/],
  ['a chunk size past 64 bits', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n`, 400, /chunked body is malformed: a chunk size/],
  ['a chunk without CRLF after its data', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n`, 400, /chunked body is malformed/],
  ['a bad chunk extension', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n1;\x01\r\nx\r\n0\r\n\r\n`, 400, /chunked body is malformed/],
  ['chunk extensions over 16 KiB', `POST /web/_db/query HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n1;a=${'b'.repeat(20_000)}\r\nx\r\n0\r\n\r\n`, 413, /chunk's extensions are over 16 KiB/],
  ['the body cut short', `POST /web/_db/query HTTP/1.1\r\n${host}Content-Length: 10\r\n\r\nabc`, 400, /connection ended before the whole request was received/],
  // Node's own 417 had no body and no x-request-id.
  ['an Expect other than 100-continue', `POST /web/_db/query HTTP/1.1\r\n${host}Expect: 200-ok\r\nContent-Length: 2\r\n\r\n{}`, 417, /^Expect: "200-ok" cannot be met: the only expectation served is 100-continue/],
  // Node closed the connection without a word (no status, no x-request-id): nothing listened for CONNECT.
  ['CONNECT, a forward proxy\'s tunnel', 'CONNECT acme.localhost:443 HTTP/1.1\r\nHost: acme.localhost:443\r\n\r\n', 400, /^CONNECT "acme\.localhost:443" asks for a tunnel, and this server is no forward proxy/],
];

for (const listener of ['the proxy', 'the reference mirror', 'the admin port'] as const) {
  describe(`malformed requests to ${listener}`, () => {
    for (const [what, bytes, status, message] of cases) {
      if (listener === 'the admin port' && status === 404) continue; // admin has no hosts: its routes answer it
      test(what, async () => {
        const url = listener === 'the proxy' ? p.url : listener === 'the reference mirror' ? p.running.mirrorUrl! : p.running.adminUrl;
        const r = await raw(url, bytes);
        if (listener !== 'the proxy' && status === 404) {
          assert.ok(r.status >= 400 && r.status < 500, `${r.status} ${r.body}`);
        } else assert.equal(r.status, status, r.body);
        const json = JSON.parse(r.body);
        assert.equal(typeof json.error.code, 'string', r.body);
        if (listener === 'the proxy') assert.match(json.error.message, message);
        assert.match(r.headers['x-request-id'] ?? '', /^[A-Za-z0-9._:@-]{8,}$/, 'x-request-id');
      });
    }
  });
}

test('bytes after a request with Connection: close: that request gets its own answer, the rest none', async () => {
  const r = await raw(p.url, `GET /web/_db/v2 HTTP/1.1\r\n${host}Connection: close\r\n\r\nGET /web/_db/v2 HTTP/1.1\r\n${host}\r\n`);
  assert.equal(r.status, 200, r.body);
  assert.ok(!r.body.includes('HTTP/1.1'), `one answer only: ${r.body}`);
});

test('a Host with UTF-8 bytes is named as sent in the error, not as Latin-1 mojibake', async () => {
  const r = await raw(p.url, Buffer.concat([Buffer.from('GET /web/ HTTP/1.1\r\nHost: '), Buffer.from('bücher.localhost', 'utf8'), Buffer.from('\r\nConnection: close\r\n\r\n')]));
  const json = JSON.parse(Buffer.from(r.body, 'latin1').toString('utf8'));
  assert.ok(r.status === 400 || r.status === 404, r.body);
  assert.match(json.error.message, /bücher/);
  assert.ok(!json.error.message.includes('Ã'), json.error.message);
});

// Found by the fuzz's apps lane: a HEAD whose headers are over the limit got the JSON body as well, which a client
// (undici: "Data after `Connection: close`") could not parse.
test('HEAD with headers over the limit: 431 without a body, readable by a real client', async () => {
  const r = await raw(p.url, `HEAD /web/ HTTP/1.1\r\n${host}X-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`);
  assert.equal(r.status, 431);
  assert.equal(r.body, '');
  const res = await request(`${p.url}/app/`, { method: 'HEAD', headers: { host: 'acme.localhost', 'x-big': 'a'.repeat(40_000) } });
  assert.equal(res.statusCode, 431);
  assert.equal(await res.body.text(), '');
});

test('the development identity provider (a person\'s browser reaches it too) answers malformed requests in SPEC 3\'s shape', async () => {
  const login = await p.call('/web/_account/login');
  assert.equal(login.status, 302, login.text);
  const issuer = new URL(String(login.headers.location)).origin;
  const r = await raw(issuer, 'GET /x HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n');
  assert.equal(r.status, 400, r.body);
  assert.match(JSON.parse(r.body).error.message, /both Content-Length and Transfer-Encoding/);
});
