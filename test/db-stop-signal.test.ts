// Issue 10 item 2 / SPEC 9: SIGTERM or SIGINT sent to the whole process group (systemctl stop, Ctrl-C) drains like
// SIGTERM to the main process: the write in flight completes, answers 200, and is there after a restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { once } from 'node:events';
import { call, ROOT_KEY, spawnProduct, tempDir, testEnv } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };
const SLOW_INSERT = 'INSERT INTO t SELECT x FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000000) SELECT x FROM c)';

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`${signal} to the process group: the write in flight completes with 200 and survives a restart`, async () => {
    const env = testEnv(tempDir(), { DB_QUERY_TIMEOUT_MS: '60000' });
    const first = await spawnProduct(env);
    let exited: Promise<number | null>;
    try {
      assert.equal((await call(first.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth })).status, 200);
      const write = call(first.url, 'localhost', '/web/_db/execute', { body: { sql: SLOW_INSERT }, headers: auth });
      await new Promise((r) => setTimeout(r, 300)); // the insert is running in an executor
      exited = new Promise((resolve) => first.child.once('exit', (code) => resolve(code)));
      process.kill(-first.child.pid!, signal);
      const reply = await write;
      assert.equal(reply.status, 200, reply.text);
      assert.equal(reply.json.results[0].rowsAffected, 1000000);
      assert.equal(await exited, 0, 'the server drained and exited cleanly');
    } catch (e) {
      first.killAll();
      throw e;
    }
    const second = await spawnProduct(env);
    try {
      const count = await call(second.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT count(*) FROM t' }, headers: auth });
      assert.deepEqual(count.json.results[0].rows, [[1000000]]);
    } finally {
      second.killAll();
    }
  });
}

test('SIGTERM with a request whose body never comes: the drain ends at SHUTDOWN_TIMEOUT_MS, not when the client gives up', async () => {
  const product = await spawnProduct(testEnv(tempDir(), { SHUTDOWN_TIMEOUT_MS: '1500' }));
  try {
    const { port } = new URL(product.url);
    const socket = connect(Number(port), '127.0.0.1');
    await once(socket, 'connect');
    socket.write(`POST /web/_db/status HTTP/1.1\r\nHost: acme.localhost:${port}\r\nAuthorization: ${auth.authorization}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"data`);
    await new Promise((r) => setTimeout(r, 300)); // the request is in flight, waiting for the rest of its body
    const exited = once(product.child, 'exit');
    const closed = once(socket, 'close');
    const started = Date.now();
    product.child.kill('SIGTERM');
    const [code] = await exited;
    assert.equal(code, 0, 'a clean stop');
    const took = Date.now() - started;
    assert.ok(took >= 1400 && took < 10_000, `stopped after ${took} ms: the deadline, not the client`);
    await closed;
  } catch (e) {
    product.killAll();
    throw e;
  }
});
