// Slow peers, in real time (about 135 s, the tests run side by side). SPEC 8 streams app traffic, and imports take
// database files of up to DB_MAX_SIZE_BYTES: a body still arriving after 120 s is not cut while it flows (Node's
// requestTimeout cut every one at 120 s with 408, an upload at 10 MB/s too). A stalled or trickling body still is,
// and so are headers that never finish. An app that never answers is 503 after 60 s, saying so.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
let app: Server;

before(async () => {
  // The app answers with the number of body bytes it got; /never, never.
  app = createServer((req, res) => {
    if (req.url === '/never') return;
    let n = 0;
    req.on('data', (d: Buffer) => (n += d.length));
    req.on('end', () => res.end(String(n)));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  p = await startProduct({ APPS: JSON.stringify({ 'acme/web': `http://127.0.0.1:${(app.address() as AddressInfo).port}` }) });
});
after(async () => {
  await p.close();
  app.closeAllConnections();
  await new Promise<void>((r) => app.close(() => r()));
});

interface Sent { status: number; body: string; seconds: number }

/** Sends `head` then `chunk` every `everyMs`, `times` times, on one connection; resolves with what came back. */
function send(head: string, chunk: Buffer, everyMs: number, times: number): Promise<Sent> {
  const { port } = new URL(p.url);
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(head));
    let sent = 0;
    const timer = setInterval(() => {
      if (sent++ < times && socket.writable) socket.write(chunk);
      else clearInterval(timer);
    }, everyMs);
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => {
      text += d;
      if (/\r\n\r\n[\s\S]*$/.test(text) && /content-length: (\d+)/i.test(text)) {
        const [headers, body] = text.split('\r\n\r\n');
        if (Buffer.byteLength(body!) >= Number(/content-length: (\d+)/i.exec(headers!)![1])) socket.end();
      }
    });
    socket.on('error', reject);
    socket.on('close', () => {
      clearInterval(timer);
      const [headers, ...rest] = text.split('\r\n\r\n');
      resolve({ status: Number(headers!.split(' ')[1]), body: rest.join('\r\n\r\n'), seconds: (Date.now() - t0) / 1000 });
    });
  });
}

const host = 'Host: acme.localhost\r\n';

describe('slow peers', { concurrency: true }, () => {
  test('a body that keeps coming is not cut at 120 s; a trickling or stalled one is, and headers that never finish', async () => {
    const chunk = Buffer.alloc(8 * 1024, 97);
    const [upload, trickle, stalled, headers] = await Promise.all([
      // An upload to an app at 8 KiB/s for 130 s. Before: 408 at 120 s, the app left with a cut body.
      send(`POST /web/upload HTTP/1.1\r\n${host}Content-Length: ${130 * chunk.length}\r\nConnection: close\r\n\r\n`, chunk, 1000, 130),
      // 64 bytes a second of a 1 MiB database request: under 1 KiB/s on average, so cut soon after 120 s.
      send(`POST /web/_db/query HTTP/1.1\r\n${host}Authorization: Bearer ${p.secret('acme', 'web')}\r\nContent-Length: ${1024 * 1024}\r\n\r\n`, Buffer.alloc(64, 32), 1000, 1000),
      // 64 KiB at once, then nothing: cut once 120 s pass without a byte.
      send(`POST /web/upload HTTP/1.1\r\n${host}Content-Length: ${1024 * 1024}\r\n\r\n${'a'.repeat(64 * 1024)}`, Buffer.alloc(0), 1000, 0),
      // Headers that never end: 408 after 15 s, as before.
      send(`GET /web/ HTTP/1.1\r\n${host}X-Slow: `, Buffer.from('a'), 1000, 60),
    ]);
    assert.equal(upload.status, 200, upload.body);
    assert.equal(upload.body, String(130 * chunk.length), 'the app got the whole body');
    assert.ok(upload.seconds > 125, `${upload.seconds}`);
    assert.equal(trickle.status, 408, trickle.body);
    assert.match(JSON.parse(trickle.body).error.message, /body came too slowly: it must be complete within 120 s, or keep coming at 1 KiB\/s on average/);
    assert.ok(trickle.seconds > 120 && trickle.seconds < 140, `${trickle.seconds}`);
    assert.equal(stalled.status, 408, stalled.body);
    assert.ok(stalled.seconds > 120 && stalled.seconds < 126, `${stalled.seconds}`);
    assert.equal(headers.status, 408, headers.body);
    assert.match(JSON.parse(headers.body).error.message, /headers were not received within 15 s/);
    assert.ok(headers.seconds < 20, `${headers.seconds}`);
  });

  test('an app that takes the request and never answers: 503 after 60 s, saying it did not answer (not that it is unreachable)', async () => {
    const t0 = Date.now();
    const r = await p.call('/web/never');
    assert.equal(r.status, 503, r.text);
    assert.equal(r.headers['retry-after'], '5');
    // Before: "the app is not reachable right now", the words for an app that is down.
    assert.equal(r.json.error.message, 'the app did not answer within 60 s');
    assert.ok(Date.now() - t0 >= 59_000, `${Date.now() - t0} ms`);
  });
});
