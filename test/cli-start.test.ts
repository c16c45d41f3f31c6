// `scopebase start` as a real child process: its banner (what to open, what to paste, what to forward) and the
// one-line refusals of ports it cannot have.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { newSecret } from './helpers/mirror.ts';
import { freePort } from './helpers/ports.ts';
import { oneLine, runCli } from './helpers/cli.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const MAIN = resolve('src/cli/main.ts');

/** Starts `scopebase start` (or `args`) and resolves its banner (everything it wrote to stderr until it is ready), then stops it meanwhile `during` runs. */
async function banner(env: Record<string, string | undefined>, opts: { cwd?: string; args?: string[]; during?: (banner: string) => Promise<void> } = {}): Promise<string> {
  const child = spawn(process.execPath, [MAIN, ...(opts.args ?? ['start'])], { cwd: opts.cwd, env: { ...process.env, PORT: '0', ADMIN_PORT: '0', LOG_LEVEL: 'silent', BASE_DOMAIN: 'localhost', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const closed = new Promise((r) => child.on('close', r));
  // The banner is one write: once its address line is there, all of it is.
  for (let i = 0; i < 300 && !/\n {2}address: /.test(stderr) && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
  try {
    await opts.during?.(stderr);
  } finally {
    child.kill('SIGTERM');
    await closed;
  }
  return stderr;
}

test('the start-up banner: the org host first, the sign-in URL and curl line, where the data lives, and development mode said plainly', async () => {
  const dataDir = tempDir();
  try {
    const dev = await banner({ DATA_DIR: dataDir, RUNTIME_ROOT_KEY: undefined, ACCOUNT_ENCRYPTION_KEYS: undefined }, {
      during: async (text) => {
        // The first URL is one that answers: the repo's landing page on an org host (the bare address is 404 unknown_host).
        const first = /^scopebase all is running: (http:\/\/acme\.localhost:(\d+)\/web\/) /.exec(text);
        assert.ok(first, text);
        const address = /\n {2}address: (http:\/\/127\.0\.0\.1:\d+) /.exec(text)![1]!;
        assert.equal(new URL(address).port, first[2]);
        assert.equal((await call(address, 'localhost', '/web/', { headers: { accept: 'text/html' } })).status, 200);
      },
    });
    const lines = dev.trim().split('\n');
    assert.match(lines[1]!, /^ {2}address: http:\/\/127\.0\.0\.1:\d+ \(admin http:\/\/127\.0\.0\.1:\d+\)$/);
    assert.match(lines[2]!, /^ {2}sign in: http:\/\/acme\.localhost:\d+\/web\/_account\/login$/);
    assert.match(lines[3]!, /^ {2}try it: {2}curl .*\/web\/_db\/status$/);
    assert.ok(dev.includes(`\n  data:    ${dataDir} (DATA_DIR)\n`), dev);
    assert.match(dev, /DEVELOPMENT MODE: keys generated in DATA_DIR \(RUNTIME_ROOT_KEY, ACCOUNT_ENCRYPTION_KEYS\) and the development identity provider \(any email signs in\); for real use set those keys, configure a sign-in provider and NODE_ENV=production/);
    const keyed = await banner({ DATA_DIR: dataDir, RUNTIME_ROOT_KEY: ROOT_KEY, ACCOUNT_ENCRYPTION_KEYS: 'c'.repeat(64) });
    assert.match(keyed, /DEVELOPMENT MODE: the development identity provider \(any email signs in\); for real use configure a sign-in provider and NODE_ENV=production/, 'set keys are not called generated, nor to be set');
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('another DATA_DIR or PORT: the banner\'s lines carry them, and its curl line\'s secret is one the server takes', async () => {
  const dataDir = tempDir('scopebase banner dir-'); // a space: the pasted line must keep it one word
  const cwd = tempDir();
  try {
    await banner({ DATA_DIR: dataDir, RUNTIME_ROOT_KEY: undefined }, {
      cwd,
      during: async (text) => {
        const port = /\n {2}address: http:\/\/127\.0\.0\.1:(\d+) /.exec(text)![1]!;
        assert.ok(text.includes(`$(DATA_DIR='${dataDir}' npx scopebase secret acme/web)`), text);
        assert.ok(text.includes(`\n  cli:     export DATA_DIR='${dataDir}' PORT=${port} (`), text);
        // What the line runs, from another folder: the secret from the server's own key, so 200, not 401.
        const secret = await promisify(execFile)('sh', ['-c', `DATA_DIR='${dataDir}' "${process.execPath}" "${MAIN}" secret acme/web`], { cwd: tempDir(), env: { ...process.env, RUNTIME_ROOT_KEY: '' } });
        const r = await call(`http://127.0.0.1:${port}`, 'localhost', '/web/_db/status', { body: {}, headers: { authorization: `Bearer ${secret.stdout.trim()}` } });
        assert.equal(r.status, 200, r.text);
      },
    });
    // Run where DATA_DIR is ./data (its default): only the port is said.
    const here = await banner({ DATA_DIR: undefined, RUNTIME_ROOT_KEY: undefined }, { cwd });
    assert.match(here, /\$\(npx scopebase secret acme\/web\)/);
    assert.match(here, /\n {2}cli: {5}export PORT=\d+ \(/);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(cwd, { recursive: true, force: true });
  }
});

test('DEV_IDP_PORT fixes the development identity provider\'s port, which the banner names; a bad or taken one is one line, exit 78', async () => {
  const dataDir = tempDir();
  const devPort = await freePort();
  try {
    const text = await banner({ ...testEnv(dataDir), DEV_IDP_PORT: String(devPort) }, {
      during: async () => {
        const discovery = await fetch(`http://127.0.0.1:${devPort}/.well-known/openid-configuration`);
        assert.equal(discovery.status, 200);
        assert.equal((await discovery.json()).issuer, `http://127.0.0.1:${devPort}`);
      },
    });
    assert.match(text, new RegExp(`\\n {2}development sign-in provider: http://127\\.0\\.0\\.1:${devPort} \\(forward this port too`));
    // Unset, any free port, named all the same.
    assert.match(await banner(testEnv(dataDir)), /\n {2}development sign-in provider: http:\/\/127\.0\.0\.1:\d+ /);

    const bad = await runCli(['start'], { ...process.env, ...testEnv(dataDir), DEV_IDP_PORT: 'x' });
    assert.equal(bad.code, 78);
    oneLine(bad, /^scopebase: configuration error: DEV_IDP_PORT: must be a whole number, got "x"$/);
    const busy = createServer();
    await new Promise<void>((r) => busy.listen(devPort, '127.0.0.1', r));
    try {
      const taken = await runCli(['start'], { ...process.env, ...testEnv(dataDir), DEV_IDP_PORT: String(devPort) });
      assert.equal(taken.code, 78, taken.stderr);
      oneLine(taken, new RegExp(`^scopebase: configuration error: DEV_IDP_PORT: port ${devPort} on 127\\.0\\.0\\.1 is already in use.*start with DEV_IDP_PORT=<another port>$`));
    } finally {
      busy.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('start on a port in use names PORT or ADMIN_PORT in one line and exits 78; a taken ADMIN_PORT stops it before any part started', async () => {
  const busy = createServer();
  await new Promise<void>((r) => busy.listen(0, '127.0.0.1', r));
  const busyPort = String((busy.address() as { port: number }).port);
  try {
    for (const [name, env] of [['PORT', { PORT: busyPort }], ['ADMIN_PORT', { PORT: '0', ADMIN_PORT: busyPort }]] as const) {
      const dataDir = tempDir();
      const r = await runCli(['start'], { ...process.env, ...testEnv(dataDir), LOG_LEVEL: 'info', LOG_FORMAT: 'json', ...env });
      rmSync(dataDir, { recursive: true, force: true });
      assert.equal(r.code, 78, r.stderr);
      oneLine(r, new RegExp(`^scopebase: configuration error: ${name}: port ${busyPort} on 127\\.0\\.0\\.1 is already in use.*start with ${name}=<another port>`));
      if (name === 'ADMIN_PORT') assert.doesNotMatch(r.stdout, /Server listening|development identity provider/, 'nothing said it started');
    }
  } finally {
    busy.close();
  }
});

/** Runs a banner's `npx scopebase …` as a fresh terminal would: no RUNTIME_ROOT_KEY, another folder; `…` filled in by `fill`. */
async function asPrinted(command: string, fill: string | null): Promise<string> {
  const line = (fill === null ? command : command.replaceAll('RUNTIME_ROOT_KEY=…', `RUNTIME_ROOT_KEY=${fill}`)).replace('npx scopebase', `"${process.execPath}" "${MAIN}"`);
  const env = { ...process.env, RUNTIME_ROOT_KEY: '', DATA_DIR: '', PORT: '' };
  return (await promisify(execFile)('sh', ['-c', line], { cwd: tempDir(), env })).stdout.trim();
}

test('a RUNTIME_ROOT_KEY given by environment: every banner names it elided, never prints it, and its lines work once it is put in', async () => {
  // DATA_DIR holds another key (an earlier development start): `DATA_DIR=… npx scopebase secret` would print a wrong secret.
  const dataDir = tempDir();
  const dbDir = tempDir();
  writeFileSync(join(dataDir, 'runtime-root.key'), 'c'.repeat(64) + '\n', { mode: 0o600 });
  const given = { DATA_DIR: dataDir, RUNTIME_ROOT_KEY: ROOT_KEY, MIRROR_SECRET: newSecret() };
  const db = await spawnProduct(testEnv(dbDir), ['serve', 'db']);
  try {
    for (const args of [['start'], ['serve', 'proxy'], ['serve', 'db'], ['serve', 'account'], ['serve', 'mirror']]) {
      const env = { ...given, DB_SERVICE_URL: db.url, MIRROR_PORT: '0', MIRROR_SOURCE_URL: db.url };
      const text = await banner(env, { args, during: async (text) => {
        const tryIt = /\$\((.*npx scopebase secret acme\/web)\)" -d '\{\}' (http:\/\/\S+)/.exec(text);
        if (args[1] === 'mirror') {
          // Its first line names where it answers (the bare address is 404 unknown_host), once.
          const query = /^scopebase mirror is running: (http:\/\/acme\.localhost:\d+\/web\/_db\/query) /.exec(text);
          assert.ok(query, text);
          assert.doesNotMatch(text, /reference mirror: /, 'its own address is not said twice');
          const r = await call(query[1]!.replace('acme.localhost', '127.0.0.1'), 'localhost', '', { method: 'POST', body: { sql: 'SELECT 1' }, headers: { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` } });
          assert.notEqual(r.json?.error?.code, 'unknown_host', r.text);
        }
        if (args[1] === 'db' || args[1] === 'account' || args[1] === 'mirror') return assert.equal(tryIt, null, text);
        assert.equal(tryIt![1], 'RUNTIME_ROOT_KEY=… npx scopebase secret acme/web', 'not DATA_DIR: the key is not there');
        assert.match(text, /\n {2}key: {5}this server was given RUNTIME_ROOT_KEY, which is never printed: put it in place of … in RUNTIME_ROOT_KEY=…\n/);
        await assert.rejects(asPrinted(tryIt![1]!, null), /RUNTIME_ROOT_KEY/, 'as printed, it says what is missing');
        const address = /\n {2}address: (http:\/\/\S+) /.exec(text)![1]!;
        const secret = await asPrinted(tryIt![1]!, ROOT_KEY);
        const r = await call(address, 'localhost', '/web/_db/status', { body: {}, headers: { authorization: `Bearer ${secret}` } });
        assert.equal(r.status, 200, `${args.join(' ')}: ${r.text}`);
        // The cli line's environment, the key put in: a command against this server with its key.
        const cli = /\n {2}cli: {5}export (.*) \(in another terminal/.exec(text)![1]!;
        assert.match(cli, /RUNTIME_ROOT_KEY=… PORT=\d+$/);
        const status = await asPrinted(`${cli} npx scopebase status --org acme --repo web`, ROOT_KEY);
        assert.match(status, /main/, status);
      } });
      assert.ok(!text.includes(ROOT_KEY), `${args.join(' ')}: the key is never printed`);
      assert.doesNotMatch(text, /DATA_DIR=\S+ npx scopebase secret/, `${args.join(' ')}: no line reads the key from DATA_DIR`);
    }
  } finally {
    db.killAll();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(dbDir, { recursive: true, force: true });
  }
});
