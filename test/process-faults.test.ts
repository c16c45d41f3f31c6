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

/** What src/shared/process-faults.ts logs one by one: 10 stray rejections every 10 s. */
const REJECTIONS_LOGGED_PER_WINDOW = 10;
const REJECTION_LOG_WINDOW_MS = 10_000;

const PRELOAD = ['--import', fileURLToPath(new URL('./helpers/fault-preload.ts', import.meta.url))];
const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };

async function start(fault: 'rejection' | 'exception', count = 1) {
  const adminPort = await freePort();
  const p = await spawnProduct(testEnv(tempDir(), { ADMIN_PORT: String(adminPort), LOG_LEVEL: 'info', LOG_FORMAT: 'json', SCOPEBASE_TEST_FAULT: fault, SCOPEBASE_TEST_FAULT_COUNT: String(count) }), ['start'], { nodeArgs: PRELOAD });
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

test('a flood of stray rejections is counted exactly, and logged at most 10 a window plus one line with the rest', async () => {
  const p = await start('rejection', 500);
  try {
    const started = Date.now();
    p.child.kill('SIGUSR2');
    let total = 0;
    while (total < 500 && Date.now() - started < 5000) {
      await sleep(100);
      total = await metric(p.adminPort, /^scopebase_unhandled_rejections_total /);
    }
    assert.equal(total, 500);
    // The rest are summed up in one line when the window ends (by then every line before it is written too).
    let summary: Record<string, any> | undefined; // eslint-disable-line @typescript-eslint/no-explicit-any
    while (!summary && Date.now() - started < REJECTION_LOG_WINDOW_MS + 5000) {
      await sleep(200);
      [summary] = logLines(p.stdout(), /more unhandled promise rejections/);
    }
    assert.ok(summary, `no summary line: ${p.stdout().slice(-600)}`);
    assert.equal(summary.level, 50);
    assert.equal(summary.notLogged, 500 - REJECTIONS_LOGGED_PER_WINDOW);
    assert.equal(summary.last.message, 'stray rejection 500 the test made');
    const one = logLines(p.stdout(), /^unhandled promise rejection/);
    assert.equal(one.length, REJECTIONS_LOGGED_PER_WINDOW, `${one.length} lines for 500 rejections in one window`);
    assert.equal(one[0]!.error.message, 'a stray rejection the test made');
    const q = await call(p.url, 'localhost', '/web/_db/execute', { body: { sql: 'CREATE TABLE t(x)' }, headers: auth });
    assert.equal(q.status, 200, q.text);
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
