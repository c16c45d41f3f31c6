// One process per part's data in DATA_DIR (docs/deploy.md, "One process per DATA_DIR"), through the real CLI: a
// second server on the same data stops with one line before it listens, a restart right after kill -9 is never
// refused, `restore --force` waits for the server to stop, and different parts still share one DATA_DIR.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY, type SpawnedProduct } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { oneLine, runCli, type Run } from './helpers/cli.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };
const sql = (url: string, op: 'execute' | 'query', statement: string) => call(url, 'localhost', `/web/_db/${op}`, { body: { sql: statement }, headers: auth });
const cli = (args: string[], env: Record<string, string>): Promise<Run> => runCli(args, { ...process.env, ...env });

/** A server command expected to stop by itself; one that starts serving instead is killed after 30 s (code -1). */
function refusedServer(args: string[], env: Record<string, string>): Promise<Run> {
  const child = spawn(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 30_000);
  return new Promise((resolve) => child.on('close', (code) => {
    clearTimeout(timer);
    resolve({ code: code ?? -1, stdout, stderr });
  }));
}

/** Stops a spawned product with SIGTERM and waits until it has exited (its locks go with it). */
async function stop(p: SpawnedProduct): Promise<void> {
  const exited = new Promise((r) => p.child.once('exit', r));
  p.child.kill('SIGTERM');
  await exited;
}

function killAllQuietly(p: SpawnedProduct | undefined): void {
  try {
    p?.killAll();
  } catch {
    // already gone
  }
}

const refusal = (part: string) => new RegExp(`^scopebase: configuration error: DATA_DIR: .+ is in use: its ${part} part \\(.+\\) is held by \`scopebase [a-z ]+\` \\(pid \\d+\\): stop that process first, or give this one another DATA_DIR`);

test('a second `start` on the same DATA_DIR exits 78 with one line before it listens; the first keeps serving; after kill -9 a new one starts at once', async () => {
  const dataDir = tempDir();
  const env = testEnv(dataDir);
  let first: SpawnedProduct | undefined;
  let third: SpawnedProduct | undefined;
  try {
    first = await spawnProduct(env);
    assert.equal((await sql(first.url, 'execute', 'CREATE TABLE t(x)')).status, 200);
    const port = String(await freePort());
    const second = await refusedServer(['start'], { ...env, PORT: port });
    assert.equal(second.code, 78, second.stderr);
    oneLine(second, refusal('db'));
    assert.ok(second.stderr.includes(`${dataDir} is in use`), second.stderr);
    assert.ok(second.stderr.includes(`held by \`scopebase start\` (pid ${first.child.pid})`), `the holder's pid is named: ${second.stderr}`);
    assert.doesNotMatch(second.stderr, /is running: /, 'no banner: it never listened');
    const w = await sql(first.url, 'execute', 'INSERT INTO t VALUES (1)');
    assert.equal(w.status, 200, `the first serves on: ${w.text}`);

    // kill -9 of the main process only: its executors may outlive it a moment, and hold no lock.
    process.kill(first.child.pid!, 'SIGKILL');
    third = await spawnProduct(env);
    assert.deepEqual((await sql(third.url, 'query', 'SELECT x FROM t')).json.results[0].rows, [[1]]);
  } finally {
    killAllQuietly(first);
    killAllQuietly(third);
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('restore --force onto a live DATA_DIR is refused in one line and changes nothing; onto a stopped one it works', async () => {
  const work = tempDir('scopebase-lock-restore-');
  const dataDir = join(work, 'data');
  const env = testEnv(dataDir);
  let product: SpawnedProduct | undefined;
  try {
    product = await spawnProduct(env);
    assert.equal((await sql(product.url, 'execute', 'CREATE TABLE t(x)')).status, 200);
    assert.equal((await sql(product.url, 'execute', 'INSERT INTO t VALUES (1)')).status, 200);
    const backup = await cli(['backup', join(work, 'b1')], env); // online by design: works while the server runs
    assert.equal(backup.code, 0, backup.stderr);
    assert.equal((await sql(product.url, 'execute', 'INSERT INTO t VALUES (2)')).status, 200);

    const live = await cli(['restore', join(work, 'b1'), '--force'], env);
    assert.equal(live.code, 1, live.stderr);
    oneLine(live, /^scopebase: DATA_DIR .+ is in use: its db part \(.+\) is held by `scopebase start` \(pid \d+\): stop it first, then restore; nothing was written$/);
    assert.deepEqual(readdirSync(work).filter((n) => n.startsWith(`${basename(dataDir)}.`)), [], 'nothing moved aside, no staging folder');
    assert.deepEqual((await sql(product.url, 'query', 'SELECT x FROM t')).json.results[0].rows, [[1], [2]], 'the server serves on, its data untouched');

    await stop(product);
    const stopped = await cli(['restore', join(work, 'b1'), '--force'], env);
    assert.equal(stopped.code, 0, stopped.stderr);
    assert.match(stopped.stdout, /previous contents are in /);
    product = await spawnProduct(env);
    assert.deepEqual((await sql(product.url, 'query', 'SELECT x FROM t')).json.results[0].rows, [[1]], 'the backup\'s content');
  } finally {
    killAllQuietly(product);
    rmSync(work, { recursive: true, force: true });
  }
});

test('different parts share one DATA_DIR; a second process of the same part is refused, naming that part', async () => {
  const dataDir = tempDir();
  const env = testEnv(dataDir);
  const started: SpawnedProduct[] = [];
  try {
    const db = await spawnProduct({ ...env, PORT: String(await freePort()) }, ['serve', 'db']);
    started.push(db);
    const account = await spawnProduct({ ...env, PORT: String(await freePort()) }, ['serve', 'account']);
    started.push(account);
    const proxy = await spawnProduct({ ...env, DB_SERVICE_URL: db.url, ACCOUNT_SERVICE_URL: account.url }, ['serve', 'proxy']);
    started.push(proxy);
    const mirrorEnv = { ...env, MIRROR_PORT: '0', MIRROR_SECRET: 'whsec_c2VjcmV0c2VjcmV0c2VjcmV0', MIRROR_SOURCE_URL: proxy.url };
    started.push(await spawnProduct(mirrorEnv, ['serve', 'mirror']));
    // A proxy owns no data: a second one on the same DATA_DIR is fine (several behind one balancer).
    started.push(await spawnProduct({ ...env, DB_SERVICE_URL: db.url, ACCOUNT_SERVICE_URL: account.url }, ['serve', 'proxy']));

    const cases: [string[], Record<string, string>, string][] = [
      [['serve', 'db'], { PORT: String(await freePort()) }, 'db'],
      // Without ACCOUNT_SERVICE_URL the proxy runs the account service itself, on the account part's stores.
      [['serve', 'proxy'], { DB_SERVICE_URL: db.url }, 'account'],
      [['serve', 'mirror'], { ...mirrorEnv, MIRROR_PORT: String(await freePort()) }, 'mirror'],
    ];
    for (const [args, extra, part] of cases) {
      const r = await refusedServer(args, { ...env, ...extra });
      assert.equal(r.code, 78, `${args.join(' ')}: ${r.stderr}`);
      oneLine(r, refusal(part));
    }
    const s = await call(proxy.url, 'localhost', '/web/_db/status', { body: {}, headers: auth });
    assert.equal(s.status, 200, s.text);
  } finally {
    for (const p of started) killAllQuietly(p);
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a server started while `restore` fills DATA_DIR exits 78 naming `scopebase restore` and its pid; once the restore ends it starts on the restored data', async () => {
  const work = tempDir('scopebase-lock-restoring-');
  const dataDir = join(work, 'data');
  const env = testEnv(dataDir);
  let product: SpawnedProduct | undefined;
  let restoring: ReturnType<typeof spawn> | undefined;
  try {
    product = await spawnProduct(env);
    // ~48 MB to copy, fsync and checksum: the restore is caught (and stopped) while it fills DATA_DIR beside it.
    assert.equal((await sql(product.url, 'execute', 'CREATE TABLE t(x)')).status, 200);
    for (let i = 0; i < 6; i++) assert.equal((await sql(product.url, 'execute', 'INSERT INTO t SELECT randomblob(1000000) FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 8) SELECT n FROM c)')).status, 200);
    const backup = await cli(['backup', join(work, 'b1')], env);
    assert.equal(backup.code, 0, backup.stderr);
    await stop(product);
    product = undefined;

    const child = spawn(process.execPath, ['src/cli/main.ts', 'restore', join(work, 'b1'), '--force'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    restoring = child;
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    child.stderr!.on('data', (d) => (out += d));
    const ended = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
    // The staging folder is made once the locks are taken; stopped there, the restore holds them for as long as the test needs.
    const staging = () => readdirSync(work).some((n) => n.startsWith(`${basename(dataDir)}.restore-`));
    const deadline = Date.now() + 60_000;
    while (!staging() && Date.now() < deadline && child.exitCode === null) { /* poll: the copy takes a few hundred ms */ }
    child.kill('SIGSTOP');
    assert.ok(staging(), `the restore was caught filling DATA_DIR (${out})`);

    const refused = await refusedServer(['start'], { ...env, PORT: String(await freePort()) });
    assert.equal(refused.code, 78, refused.stderr);
    oneLine(refused, new RegExp(`^scopebase: configuration error: DATA_DIR: .+ is in use: its db part \\(.+\\) is held by \`scopebase restore\` \\(pid ${child.pid}\\): wait for the restore to end, then start again$`));

    child.kill('SIGCONT');
    assert.equal(await ended, 0, out);
    restoring = undefined;
    product = await spawnProduct(env);
    assert.deepEqual((await sql(product.url, 'query', 'SELECT count(*) FROM t')).json.results[0].rows, [[48]], 'the restored data');
  } finally {
    restoring?.kill('SIGKILL');
    killAllQuietly(product);
    rmSync(work, { recursive: true, force: true });
  }
});
