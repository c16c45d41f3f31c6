// An executor process that sends a frame the service cannot read (a bug in our own child) is stopped and replaced as
// a crashed one is; the server, which serves every org, keeps serving. The decoder's throw reached the pipe's 'data'
// handler: an uncaught exception, and `scopebase start` exited 70 (src/shared/process-faults.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFileSync, readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const PRELOAD = fileURLToPath(new URL('./helpers/executor-frame-preload.ts', import.meta.url));
const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };

/** The server's executor processes (its children running child.ts). */
function executors(pid: number): number[] {
  const children = readdirSync(`/proc/${pid}/task`).flatMap((t) => readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
  return children.filter((c) => {
    try {
      return readFileSync(`/proc/${c}/cmdline`, 'utf8').includes('child.');
    } catch {
      return false; // gone meanwhile
    }
  });
}

test('an executor that sends a malformed frame is replaced, logged, and the server keeps serving', async () => {
  const env = testEnv(tempDir(), { LOG_LEVEL: 'info', LOG_FORMAT: 'json', DB_EXECUTORS: '1', SCOPEBASE_EXECUTOR_NODE_ARGS: `--import ${PRELOAD}` });
  const p = await spawnProduct(env, ['start']);
  try {
    const first = await call(p.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth });
    assert.equal(first.status, 200, first.text);
    const pids = executors(p.child.pid!);
    assert.ok(pids.length > 0, 'no executor process found');
    const exited = once(p.child, 'exit');
    for (const pid of pids) process.kill(pid, 'SIGUSR2');
    const over = await Promise.race([exited.then(([code]) => `exited with ${code}`), sleep(1500).then(() => 'alive')]);
    assert.equal(over, 'alive', `the server stopped on its executor's malformed frame: ${p.stdout().slice(-800)}`);
    const after = await call(p.url, 'localhost', '/web/_db/execute', { body: { sql: 'INSERT INTO t VALUES (1)' }, headers: auth });
    assert.equal(after.status, 200, after.text);
    const read = await call(p.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT count(*) AS n FROM t' }, headers: auth });
    assert.equal(read.status, 200, read.text);
    assert.deepEqual((JSON.parse(read.text) as { results: { rows: unknown[][] }[] }).results[0]!.rows, [[1]]);
    for (const pid of pids) assert.throws(() => process.kill(pid, 0), /ESRCH/, `executor ${pid} was not stopped`);
    const lines = p.stdout().split('\n').filter((l) => l.includes('cannot be read'));
    assert.ok(lines.length > 0, `no log line for the malformed frame: ${p.stdout().slice(-800)}`);
    assert.match(lines[0]!, /a frame of 4 bytes/);
  } finally {
    p.killAll();
  }
});
