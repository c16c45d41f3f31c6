// Issue 10 item 2 / SPEC 9: SIGTERM or SIGINT sent to the whole process group (systemctl stop, Ctrl-C) drains like
// SIGTERM to the main process: the write in flight completes, answers 200, and is there after a restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
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

test('kill -9 of the server while an executor runs a runaway statement: the executor does not spin on, orphaned', async (t) => {
  const product = await spawnProduct(testEnv(tempDir(), { DB_QUERY_TIMEOUT_MS: '120000' }));
  t.after(() => {
    try {
      product.killAll(); // a failed assertion must not leave the server and its runaway behind
    } catch {
      // its process group is gone already
    }
  });
  const children = () => readFileSync(`/proc/${product.child.pid}/task/${product.child.pid}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number);
  assert.equal((await call(product.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth })).status, 200);
  const runaway = call(product.url, 'localhost', '/web/_db/query', { body: { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' }, headers: auth }).catch(() => null);
  await new Promise((r) => setTimeout(r, 500)); // the statement is running in an executor
  // A child listed a moment ago may be gone by now (an executor replaced, the killed shell): it reads as nothing.
  const proc = (pid: number, file: string) => {
    try {
      return readFileSync(`/proc/${pid}/${file}`, 'utf8');
    } catch {
      return '';
    }
  };
  const cmdline = (pid: number) => proc(pid, 'cmdline');
  // The shell that kills the server's executors if it dies: killed itself, another takes its place.
  const shells = () => children().filter((pid) => cmdline(pid).includes('while read -r line'));
  const [first] = shells();
  assert.ok(first, 'the reaper shell runs');
  process.kill(first, 'SIGKILL');
  const back = Date.now() + 5000;
  while (!shells().some((pid) => pid !== first) && Date.now() < back) await new Promise((r) => setTimeout(r, 50));
  assert.ok(shells().some((pid) => pid !== first), 'a new reaper shell took over');
  const executors = children().filter((pid) => cmdline(pid).includes('child.ts'));
  const cpu = (pid: number) => Number(proc(pid, 'stat').split(') ')[1]?.split(' ')[11] ?? 0);
  // Busy means it keeps taking CPU time; on a loaded machine (CI runs test files side by side) it may get little of
  // it in any one moment, so watch for up to 10 s until one executor has used 200 ms.
  const before = executors.map(cpu);
  const watch = Date.now() + 10_000;
  const busy = () => executors.some((pid, i) => cpu(pid) - before[i]! >= 20);
  while (!busy() && Date.now() < watch) await new Promise((r) => setTimeout(r, 100));
  assert.ok(busy(), 'premise: an executor is busy with the runaway');
  product.child.kill('SIGKILL');
  await runaway;
  const alive = (pid: number) => {
    try {
      return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8')); // a zombie has stopped running
    } catch {
      return false;
    }
  };
  const until = Date.now() + 5000;
  while (executors.some(alive) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
  const left = executors.filter(alive);
  for (const pid of left) process.kill(pid, 'SIGKILL');
  assert.deepEqual(left, [], 'every executor ended with its server');
});
