// The proxy's side of the channel to `serve db` (src/db/channel.ts): a reply frame that does not parse (a peer of
// another version, or DB_SERVICE_URL naming a server that is not `serve db`) threw out of the socket's 'data' handler
// and stopped `serve proxy`, every org's service with it; one that parses but names no HTTP status left its request
// unanswered for ever (writing the answer threw). The connection is cut instead, its requests answered 503.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './helpers/ports.ts';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { CHANNEL_PROTOCOL } from '../src/db/channel.ts';
import { encodeFrame } from '../src/db/executor/protocol.ts';

const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };

/**
 * A fake `serve db` on loopback: it takes the channel's upgrade and answers the first frame with `reply(seq)`; over
 * HTTP (while the channel connects) it answers 503. Then `serve proxy` in front of it: one query over HTTP, one over
 * the channel, and the proxy must still be serving.
 */
async function throughFakeDb(reply: (seq: number) => Buffer): Promise<void> {
  const fake = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
      res.end(JSON.stringify({ error: { code: 'unavailable', message: 'a fake database service' } }));
    });
  });
  fake.on('upgrade', (_req, socket) => {
    socket.on('error', () => {});
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${CHANNEL_PROTOCOL}\r\n\r\n`);
    socket.once('data', (d: Buffer) => socket.write(reply(d.readUInt32LE(4))));
  });
  await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
  const adminPort = await freePort();
  const proxy = await spawnProduct(testEnv(tempDir(), { ADMIN_PORT: String(adminPort), LOG_LEVEL: 'warn', DB_SERVICE_URL: `http://127.0.0.1:${(fake.address() as AddressInfo).port}` }), ['serve', 'proxy']);
  try {
    const exited = once(proxy.child, 'exit');
    const query = () => call(proxy.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT 1' }, headers: auth });
    const first = await query(); // over HTTP while the channel connects
    assert.equal(first.status, 503, first.text);
    await sleep(300);
    const unanswered = sleep(5000).then(() => ({ status: -1, text: 'no answer in 5 s', json: undefined }));
    const second = await Promise.race([query().catch((e: Error) => ({ status: 0, text: e.message, json: undefined })), unanswered]); // over the channel
    assert.equal(second.status, 503, `${second.text}; serve proxy's stderr: ${proxy.stderr().slice(-600)}`);
    assert.equal(second.json?.error?.code, 'unavailable', second.text);
    const over = await Promise.race([exited.then(([code]) => `exited with ${code}`), sleep(500).then(() => 'alive')]);
    assert.equal(over, 'alive', `serve proxy stopped: ${proxy.stderr().slice(-600)}`);
    assert.equal((await fetch(`http://127.0.0.1:${adminPort}/healthz`)).status, 200);
    assert.equal((await query()).status, 503); // still answering
  } finally {
    proxy.killAll();
    fake.closeAllConnections();
    fake.close();
  }
}

test('serve proxy survives a malformed frame from its database service, and answers its request 503', async () => {
  await throughFakeDb(() => Buffer.from([2, 0, 0, 0, 0, 0])); // a frame of 2 bytes: none is under 8
});

test('a reply frame without an HTTP status is answered 503, not left unanswered', async () => {
  await throughFakeDb((seq) => encodeFrame(seq, { headers: {} }, '{}'));
});
