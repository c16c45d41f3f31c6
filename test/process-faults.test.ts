// One process serves every org: a fault no request owns must not stop it unless its state is unknown
// (src/shared/process-faults.ts, docs/reliability.md "Faults outside a request"). The real product, started with a
// preload that makes the fault on SIGUSR2: a stray rejection is logged and counted and the process keeps serving; an
// uncaught exception is logged and the process exits 70 for its supervisor to restart it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { metric } from './helpers/ask-from.ts';
import { freePort } from './helpers/ports.ts';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const PRELOAD = ['--import', fileURLToPath(new URL('./helpers/fault-preload.ts', import.meta.url))];
const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };

async function start(fault: 'rejection' | 'exception') {
  const adminPort = await freePort();
  const p = await spawnProduct(testEnv(tempDir(), { ADMIN_PORT: String(adminPort), LOG_LEVEL: 'info', LOG_FORMAT: 'json', SCOPEBASE_TEST_FAULT: fault }), ['start'], { nodeArgs: PRELOAD });
  return { ...p, adminPort };
}

/** The JSON log lines on stdout whose msg matches `msg`. */
const logLines = (stdout: string, msg: RegExp) => stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, any>).filter((l) => msg.test(String(l.msg))); // eslint-disable-line @typescript-eslint/no-explicit-any

test('a stray rejection is logged and counted, and the process keeps serving every org', async () => {
  const p = await start('rejection');
  try {
    const exited = once(p.child, 'exit');
    p.child.kill('SIGUSR2');
    const over = await Promise.race([exited.then(([code]) => `exited with ${code}`), sleep(1000).then(() => 'alive')]);
    assert.equal(over, 'alive', `the process stopped on a rejection no request owned: ${p.stderr().slice(-600)}`);
    const q = await call(p.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth });
    assert.equal(q.status, 200, q.text);
    assert.equal(await metric(p.adminPort, /^scopebase_unhandled_rejections_total /), 1);
    const [line] = logLines(p.stdout(), /unhandled promise rejection/);
    assert.ok(line, `no log line for the rejection: ${p.stdout().slice(-600)}`);
    assert.equal(line.level, 50); // error
    assert.equal(line.error.type, 'Error');
    assert.equal(line.error.message, 'a stray rejection the test made');
    assert.match(line.error.stack, /fault-preload\.ts/);
  } finally {
    p.killAll();
  }
});

test('an uncaught exception is logged and the process exits 70 for its supervisor to restart it', async () => {
  const p = await start('exception');
  try {
    const exited = once(p.child, 'exit');
    p.child.kill('SIGUSR2');
    const [code] = await Promise.race([exited, sleep(10_000).then(() => ['still running'])]);
    assert.equal(code, 70, p.stderr().slice(-600));
    const [line] = logLines(p.stdout(), /uncaught exception/);
    assert.ok(line, `no log line for the exception: ${p.stdout().slice(-600)}`);
    assert.equal(line.level, 60); // fatal
    assert.equal(line.error.message, 'an uncaught exception the test made');
  } finally {
    p.killAll();
  }
});
