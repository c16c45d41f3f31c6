// SPEC 4.1 key rotation, 4.6 the migrate CLI, and the TypeScript client, against the real product over HTTP.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { startProduct, tempDir, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { createClient, ScopebaseError } from '../src/client/index.ts';

const NEW_KEY = 'e'.repeat(64);

test('a comma list of root keys rotates: the first is current, every listed key is accepted', async () => {
  const p = await startProduct({ RUNTIME_ROOT_KEY: `${NEW_KEY},${ROOT_KEY}` });
  try {
    const oldSecret = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');
    const newSecret = repoSecret(Buffer.from(NEW_KEY, 'hex'), 'acme', 'web');
    assert.equal(p.secret('acme', 'web'), newSecret, 'the current secret comes from the first key');
    assert.equal((await p.db('web', 'status', {}, { secret: oldSecret })).status, 200);
    assert.equal((await p.db('web', 'status', {}, { secret: newSecret })).status, 200);
    const printed = spawnSync(process.execPath, ['src/cli/main.ts', 'secret', 'acme/web'], { env: { ...process.env, RUNTIME_ROOT_KEY: `${NEW_KEY},${ROOT_KEY}` }, encoding: 'utf8' });
    assert.equal(printed.stdout.trim(), newSecret);
  } finally {
    await p.close();
  }
  const dropped = await startProduct({ RUNTIME_ROOT_KEY: NEW_KEY });
  try {
    const r = await dropped.db('web', 'status', {}, { secret: repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web') });
    assert.equal(r.status, 401, 'once the old key is dropped its secrets stop working');
  } finally {
    await dropped.close();
  }
});

test('`scopebase migrate <dir>` sends NNNN_name.sql files in file-name order and prints what it did', async () => {
  const p = await startProduct();
  const dir = tempDir('scopebase-migrations-');
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, '0002_tags.sql'), 'CREATE TABLE tags(todo INTEGER REFERENCES todos(id), name TEXT);');
    writeFileSync(join(dir, '0001_init.sql'), 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT);');
    writeFileSync(join(dir, 'README.md'), 'not a migration');
    const env = { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, BASE_DOMAIN: 'localhost' };
    // Asynchronous: the product under test runs in this process and must keep answering while the CLI waits.
    const run = (...extra: string[]) => new Promise<{ status: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, ['src/cli/main.ts', 'migrate', dir, '--repo', 'acme/web', '--url', p.url, ...extra], { env }, (err, stdout, stderr) => {
        resolve({ status: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
      });
    });
    const dry = await run('--dry-run');
    assert.equal(dry.status, 0, dry.stderr);
    assert.match(dry.stdout, /would apply 2: 0001_init, 0002_tags; already applied 0; version 0/);
    const first = await run();
    assert.equal(first.status, 0, first.stderr);
    assert.match(first.stderr, /read 2 migration files/);
    assert.match(first.stdout, /applied 2: 0001_init, 0002_tags; already applied 0; version 1/);
    const again = await run();
    assert.match(again.stdout, /applied 0: \(none\); already applied 2; version 1/);
    writeFileSync(join(dir, '0001_init.sql'), 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT, done INTEGER);');
    const conflict = await run();
    assert.equal(conflict.status, 1);
    assert.match(conflict.stderr, /409 migration_conflict: .*0001_init/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await p.close();
  }
});

test('the TypeScript client: migrate, execute, query, status, and errors as ScopebaseError', async () => {
  const p = await startProduct();
  try {
    const port = new URL(p.url).port;
    // Node's fetch cannot set Host, so this test's fetch sends the org host with undici (a deployment uses the real host name).
    const hostFetch = (async (url: string, init: { method: string; headers: Record<string, string>; body: string }) => {
      const res = await request(url, { method: init.method as 'POST', headers: { ...init.headers, host: `acme.localhost:${port}` }, body: init.body });
      const text = await res.body.text();
      return new Response(text, { status: res.statusCode });
    }) as unknown as typeof fetch;
    const db = createClient({ baseUrl: `${p.url}/web`, secret: p.secret('acme', 'web'), fetch: hostFetch });
    assert.deepEqual((await db.migrate([{ id: '1', sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)' }])).applied, ['1']);
    const w = await db.execute('INSERT INTO t(v) VALUES (?)', ['x']);
    assert.equal(w.lastInsertRowid, 1);
    const r = await db.query('SELECT v FROM t');
    assert.deepEqual(r.values, [['x']]);
    assert.equal((await db.status()).version, 2);
    await assert.rejects(db.query('SELECT * FROM nope'), (e: unknown) => e instanceof ScopebaseError && e.status === 400 && e.code === 'sql_error');
  } finally {
    await p.close();
  }
});
