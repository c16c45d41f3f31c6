// Node takes its own 'error' listener off a socket it hands to a 'connect' (or 'upgrade') listener. A CONNECT is
// answered 400 there (client-errors.ts); a client that then reset its connection raised ECONNRESET on a socket with
// no listener: an uncaught error that stopped the process, every org's service with it, for one packet of anyone's.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './helpers/ports.ts';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };

/** Sends CONNECT, waits for the start of the answer, then resets the connection (RST, not FIN); resolves with what came. */
function connectThenReset(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(`CONNECT example.com:443 HTTP/1.1\r\nHost: acme.localhost:${port}\r\n\r\n`));
    s.once('data', (d) => {
      s.resetAndDestroy();
      resolve(String(d));
    });
    s.on('error', reject);
  });
}

test('a client that resets its connection after a CONNECT does not stop the process (public and admin ports)', async () => {
  const adminPort = await freePort();
  const p = await spawnProduct(testEnv(tempDir(), { ADMIN_PORT: String(adminPort), LOG_LEVEL: 'warn' }));
  try {
    const exited = once(p.child, 'exit');
    for (const [name, port] of [['public', Number(new URL(p.url).port)], ['admin', adminPort]] as const) {
      const answer = await connectThenReset(port);
      assert.match(answer, /^HTTP\/1\.1 400 /, 'premise: CONNECT is answered 400');
      const over = await Promise.race([exited.then(([code]) => `exited with ${code}`), sleep(500).then(() => 'alive')]);
      assert.equal(over, 'alive', `the process stopped after a reset on the ${name} port: ${p.stderr().slice(-600)}`);
    }
    const q = await call(p.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth });
    assert.equal(q.status, 200, q.text);
    assert.equal((await fetch(`http://127.0.0.1:${adminPort}/healthz`)).status, 200);
  } finally {
    p.killAll();
  }
});
