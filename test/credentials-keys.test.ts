// Keys at start, a tampered store, and `scopebase rotate-keys` (add a key, rotate, drop the old one).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { startCredentialsProduct, tempDir, testEnv, type CredProduct } from './helpers/credentials-product.ts';
import { signInUser, type SignedIn } from './helpers/session.ts';
import { rotateKeys } from '../src/cli/rotate-keys.ts';
import { CredentialStore } from '../src/account/credentials/store.ts';
import { ConfigError } from '../src/shared/config.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const A = randomBytes(32).toString('hex');
const B = randomBytes(32).toString('hex');

function runtime(p: CredProduct, method: string, path: string, user: string, body?: unknown) {
  return p.call(`/web/_account${path}?user=${encodeURIComponent(user)}`, {
    method, headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
    ...(body !== undefined ? { rawBody: JSON.stringify(body) } : {}),
  });
}

function sink(isTTY = false): Writable & { isTTY: boolean; text: () => string } {
  let text = '';
  const w = new Writable({ write(c, _e, done) { text += String(c); done(); } }) as Writable & { isTTY: boolean; text: () => string };
  w.isTTY = isTTY;
  w.text = () => text;
  return w;
}

/**
 * `scopebase start` in its own process must print a configuration error naming ACCOUNT_ENCRYPTION_KEYS.
 * Resolves with its stderr and exit code (null when it had to be killed: it printed the error but did not exit).
 */
function refusesToStart(env: Record<string, string>): Promise<{ stderr: string; code: number | null }> {
  const child = spawn(process.execPath, ['src/cli/main.ts', 'start'], { env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.setEncoding('utf8');
  return new Promise((resolve) => {
    let killer: NodeJS.Timeout | undefined;
    const hardStop = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.stderr.on('data', (d: string) => {
      stderr += d;
      if (/configuration error/.test(stderr) && !killer) killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    });
    child.on('exit', (code) => {
      clearTimeout(hardStop);
      clearTimeout(killer);
      assert.match(stderr, /configuration error: ACCOUNT_ENCRYPTION_KEYS: /);
      assert.ok(!stderr.includes(A) && !stderr.includes(B), 'the message holds a key');
      resolve({ stderr, code });
    });
  });
}

const exitCodes: (number | null)[] = [];

test('start refuses when stored records use a key that is not configured; the old key back makes them readable', async () => {
  const dir = tempDir('scopebase-keys-');
  try {
    let p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: A });
    const u = await signInUser(p, 'acme', 'alice');
    assert.equal((await runtime(p, 'PUT', '/credentials/gh/token', u.userId, { value: 'v1' })).status, 201);
    await p.close();
    // Wrong key only.
    const wrong = await refusesToStart(testEnv(dir, { ACCOUNT_ENCRYPTION_KEYS: B }));
    assert.match(wrong.stderr, /not configured/);
    exitCodes.push(wrong.code);
    // The same check in-process, as the store opens.
    assert.throws(() => CredentialStore.open(dir, [Buffer.from(B, 'hex')]), (e) => e instanceof ConfigError && /^ACCOUNT_ENCRYPTION_KEYS: .*not configured/.test(e.message));
    // No key in development: one would be generated, which cannot open the records either.
    const env = testEnv(dir, {});
    delete env.ACCOUNT_ENCRYPTION_KEYS;
    exitCodes.push((await refusesToStart(env)).code);
    // No key in production: the configuration itself refuses.
    await refusesToStart({ ...env, NODE_ENV: 'production', ACCOUNT_GITHUB_CLIENT_ID: 'x', ACCOUNT_GITHUB_CLIENT_SECRET: 'y' });
    p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: `${B},${A}` });
    assert.equal((await runtime(p, 'GET', '/credentials/gh/token', u.userId)).json.value, 'v1');
    await p.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a refused start exits with 78', () => {
  assert.deepEqual(exitCodes, [78, 78]);
});

test('a tampered or moved record gives 500 internal with a non-secret message and a log line without values', async () => {
  const p = await startCredentialsProduct();
  try {
    const alice = await signInUser(p, 'acme', 'alice');
    const bob = await signInUser(p, 'acme', 'bob');
    const marker = `TAMPER-${randomBytes(8).toString('hex')}`;
    for (const name of ['flip', 'moved', 'truncated', 'nonce', 'unknownkey']) {
      assert.equal((await runtime(p, 'PUT', `/credentials/t/${name}`, alice.userId, { value: marker })).status, 201);
    }
    const db = openSqlite(join(p.dataDir, 'credentials.sqlite'));
    const row = (name: string) => db.prepare("SELECT rowid, ciphertext, nonce FROM credentials WHERE plugin = 't' AND name = ?").get(name) as { rowid: number; ciphertext: Uint8Array; nonce: Uint8Array };
    const flipped = Buffer.from(row('flip').ciphertext);
    flipped[3]! ^= 0x20;
    db.prepare('UPDATE credentials SET ciphertext = ? WHERE rowid = ?').run(flipped, row('flip').rowid);
    db.prepare('UPDATE credentials SET user_id = ? WHERE rowid = ?').run(bob.userId, row('moved').rowid);
    db.prepare('UPDATE credentials SET ciphertext = ? WHERE rowid = ?').run(Buffer.from(row('truncated').ciphertext).subarray(0, 10), row('truncated').rowid);
    db.prepare('UPDATE credentials SET nonce = ? WHERE rowid = ?').run(Buffer.alloc(12), row('nonce').rowid);
    db.prepare("UPDATE credentials SET key_id = '0000000000000000' WHERE rowid = ?").run(row('unknownkey').rowid);
    db.close();
    for (const [name, user] of [['flip', alice.userId], ['moved', bob.userId], ['truncated', alice.userId], ['nonce', alice.userId], ['unknownkey', alice.userId]] as const) {
      const r = await runtime(p, 'GET', `/credentials/t/${name}`, user);
      assert.equal(r.status, 500, `${name}: ${r.text}`);
      assert.equal(r.json.error.code, 'internal');
      assert.match(r.json.error.message, /could not be opened/);
      assert.ok(!r.text.includes(marker));
    }
    // The moved record is gone from its old owner.
    assert.equal((await runtime(p, 'GET', '/credentials/t/moved', alice.userId)).status, 404);
    const lines = p.logs().split('\n').filter((l) => l.includes('could not be opened'));
    assert.equal(lines.length, 5);
    assert.deepEqual(lines.map((l) => JSON.parse(l).reason).sort(), ['auth_failed', 'auth_failed', 'auth_failed', 'malformed', 'unknown_key']);
    assert.ok(!p.logs().includes(marker));
  } finally {
    await p.close();
  }
});

test('rotate-keys where DATA_DIR holds no credential store stops (exit 78), and makes no keys nor store there', () => {
  const dir = tempDir('scopebase-rotate-nowhere-');
  try {
    const env = { ...process.env, ...testEnv(join(dir, 'data')) };
    delete env.ACCOUNT_ENCRYPTION_KEYS; // as in a development clone: keys in DATA_DIR
    const r = spawnSync(process.execPath, ['src/cli/main.ts', 'rotate-keys'], { env, encoding: 'utf8' });
    assert.equal(r.status, 78, r.stderr);
    assert.match(r.stderr, /^scopebase: configuration error: DATA_DIR: there is no credential store at .*credentials\.sqlite, so nothing to re-seal: run rotate-keys with the server's DATA_DIR/);
    assert.equal(r.stdout, '', 'no "re-sealed 0" as if it had rotated');
    assert.deepEqual(readdirSync(dir), [], 'no data folder, key or store made');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('rotate-keys: add the new key first, rotate while running, drop the old key; everything stays readable', async () => {
  const dir = tempDir('scopebase-rotate-');
  try {
    let p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: A });
    const users: SignedIn[] = [await signInUser(p, 'acme', 'u1'), await signInUser(p, 'acme', 'u2')];
    const expected = new Map<string, unknown>();
    for (let i = 0; i < 5; i++) {
      const u = users[i % 2]!;
      const value = i % 2 ? { n: i, s: `secret-${i}` } : `secret-${i}`;
      assert.equal((await runtime(p, 'PUT', `/credentials/p/c${i}`, u.userId, { value })).status, 201);
      expected.set(`${u.userId}/c${i}`, value);
    }
    await p.close();

    // Step 1: the new key goes first, the old one stays; the service runs.
    p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: `${B},${A}` });
    for (let i = 5; i < 7; i++) {
      const u = users[i % 2]!;
      assert.equal((await runtime(p, 'PUT', `/credentials/p/c${i}`, u.userId, { value: `secret-${i}` })).status, 201);
      expected.set(`${u.userId}/c${i}`, `secret-${i}`);
    }
    // Step 2: rotate while it runs.
    const env = testEnv(dir, { ACCOUNT_ENCRYPTION_KEYS: `${B},${A}` });
    const progress = sink(false);
    let r = await rotateKeys({ env, progress, batch: 2 });
    assert.deepEqual(r, { resealed: 5, current: 2, gone: 0, failed: 0, total: 7 });
    assert.match(progress.text(), /^re-sealing 7 credentials under key id [0-9a-f]{16}\n/);
    assert.match(progress.text(), /7\/7\n$/);
    assert.ok(!progress.text().includes('\r'));
    // Idempotent, and the TTY form draws a bar in place.
    const tty = sink(true);
    r = await rotateKeys({ env, progress: tty });
    assert.deepEqual(r, { resealed: 0, current: 7, gone: 0, failed: 0, total: 7 });
    assert.match(tty.text(), /\r\[#{30}\] 7\/7\n$/);
    for (const [key, value] of expected) {
      const [user, name] = key.split('/') as [string, string];
      assert.deepEqual((await runtime(p, 'GET', `/credentials/p/${name}`, user)).json.value, value);
    }
    await p.close();

    // Step 3: drop the old key.
    p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: B });
    for (const [key, value] of expected) {
      const [user, name] = key.split('/') as [string, string];
      const got = await runtime(p, 'GET', `/credentials/p/${name}`, user);
      assert.equal(got.status, 200, got.text);
      assert.deepEqual(got.json.value, value);
    }
    // Listing metadata (dates) survives rotation untouched.
    const list = await p.call('/web/_account/credentials', { headers: { cookie: users[0]!.cookie } });
    assert.equal(list.json.credentials.length, 4);
    await p.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('re-sealing loses no concurrent write: a record replaced or deleted meanwhile is left to the writer', async () => {
  const dir = tempDir('scopebase-race-');
  try {
    let p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: A });
    const u = await signInUser(p, 'acme', 'u');
    for (const n of ['a', 'b', 'c']) await runtime(p, 'PUT', `/credentials/p/${n}`, u.userId, { value: `old-${n}` });
    await p.close();
    p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: `${B},${A}` });
    const store = CredentialStore.open(dir, [Buffer.from(B, 'hex'), Buffer.from(A, 'hex')]);
    try {
      const [ra, rb, rc] = store.rowidsAfter(0, 10) as [number, number, number];
      // Between listing and re-sealing, the service replaces one and deletes another.
      await runtime(p, 'PUT', '/credentials/p/a', u.userId, { value: 'new-a' });
      await runtime(p, 'DELETE', '/credentials/p/b', u.userId);
      assert.equal(store.reseal(ra), 'current');
      assert.equal(store.reseal(rb), 'gone');
      assert.equal(store.reseal(rc), 'resealed');
      assert.equal(store.reseal(rc), 'current');
    } finally {
      store.close();
    }
    assert.equal((await runtime(p, 'GET', '/credentials/p/a', u.userId)).json.value, 'new-a');
    assert.equal((await runtime(p, 'GET', '/credentials/p/b', u.userId)).status, 404);
    assert.equal((await runtime(p, 'GET', '/credentials/p/c', u.userId)).json.value, 'old-c');
    await p.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the CLI: scopebase rotate-keys prints progress on stderr and the counts on stdout', async () => {
  const dir = tempDir('scopebase-cli-');
  try {
    const p = await startCredentialsProduct({ DATA_DIR: dir, ACCOUNT_ENCRYPTION_KEYS: A });
    const u = await signInUser(p, 'acme', 'u');
    await runtime(p, 'PUT', '/credentials/p/x', u.userId, { value: 'x' });
    await p.close();
    const run = (keys: string) => spawnSync(process.execPath, ['src/cli/main.ts', 'rotate-keys'], { env: { ...process.env, ...testEnv(dir, { ACCOUNT_ENCRYPTION_KEYS: keys }) }, encoding: 'utf8' });
    let out = run(B);
    assert.equal(out.status, 78, out.stderr);
    assert.match(out.stderr, /configuration error: ACCOUNT_ENCRYPTION_KEYS: .*not configured/);
    out = run(`${B},${A}`);
    assert.equal(out.status, 0, out.stderr);
    assert.equal(out.stdout, 're-sealed 1, already current 0\n');
    assert.match(out.stderr, /re-sealing 1 credential under key id/);
    out = run(`${B},${A}`);
    assert.equal(out.stdout, 're-sealed 0, already current 1\n');
    out = run(B);
    assert.equal(out.status, 0, out.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
