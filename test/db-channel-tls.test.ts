// `serve proxy` with DB_SERVICE_URL=https://…: every connection it opens to the database service speaks TLS. The
// frame channel beside the HTTP pool connected with plain TCP and sent its upgrade, proxy token included, in the clear.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { startProduct } from './helpers/product.ts';

test('with an https DB_SERVICE_URL, the proxy opens no plain-text connection to the database service (its token stays off the wire)', async () => {
  const seen: Buffer[] = [];
  const sockets = new Set<Socket>();
  // Stands where a TLS-terminating front of `serve db` would: records each connection's first bytes, answers nothing.
  const listener = createServer((socket) => {
    sockets.add(socket);
    let first = Buffer.alloc(0);
    socket.on('data', (d) => {
      if (first.length === 0) seen.push((first = Buffer.from(d)));
      else seen[seen.indexOf(first)] = first = Buffer.concat([first, d]);
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const port = (listener.address() as AddressInfo).port;
  const p = await startProduct({ DB_SERVICE_URL: `https://127.0.0.1:${port}`, ACCOUNT_SERVICE_URL: 'http://127.0.0.1:9' }, 'proxy');
  try {
    const pending = p.db('web', 'status', {}).catch(() => null); // never answered: the listener speaks no TLS
    for (let t0 = Date.now(); seen.length < 2 && Date.now() - t0 < 5000;) await new Promise((r) => setTimeout(r, 50));
    assert.ok(seen.length >= 2, `both the HTTP pool and the channel connected (${seen.length} connections)`);
    for (const bytes of seen) {
      assert.equal(bytes[0], 0x16, `a TLS handshake record first, not ${JSON.stringify(bytes.subarray(0, 40).toString('latin1'))}`);
      assert.ok(!bytes.toString('latin1').includes('x-scopebase-proxy-token'), 'no proxy token in the clear');
    }
    for (const s of sockets) s.destroy();
    await pending;
  } finally {
    for (const s of sockets) s.destroy();
    await p.close();
    listener.close();
  }
});
