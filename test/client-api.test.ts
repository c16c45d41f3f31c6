// The client (src/client): against the real product for the API (typed rows, values, batches, migrations, errors),
// and against a scripted loopback server for what the product cannot be made to do on demand (503/429 with
// Retry-After, a server that never answers), to pin down when the client retries, times out and aborts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { mkdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, tempDir } from './helpers/product.ts';
import {
  AbortError, ConstraintViolationError, createClient, MigrationConflictError, NetworkError, QueryTimeoutError,
  ReadOnlyError, ScopebaseError, TimeoutError, UnavailableError, RateLimitedError,
} from '../src/client/index.ts';

test('query, read, execute, batch, migrate and status against the product, with typed rows and exact values', async () => {
  const p = await startProduct({ DB_QUERY_TIMEOUT_MS: '1000' }); // the runaway below stops at 1 s; a first write's fsyncs fit
  const dir = tempDir('scopebase-client-');
  try {
    const port = new URL(p.url).port;
    const db = createClient({ url: p.url, org: 'acme', repo: 'web', secret: p.secret('acme', 'web') });
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, '0001_todos.sql'), 'CREATE TABLE todos(id INTEGER PRIMARY KEY, title TEXT UNIQUE, big INTEGER, data BLOB);');
    writeFileSync(join(dir, 'README.md'), 'skipped');
    assert.deepEqual((await db.migrate(dir)).applied, ['0001_todos']);
    await assert.rejects(db.migrate([{ id: '0001_todos', sql: 'CREATE TABLE other(x)' }]), (e) => e instanceof MigrationConflictError && e.status === 409);

    const big = -(2n ** 62n) + 1n;
    const bytes = new Uint8Array([0, 255, 10, 13]);
    const w = await db.execute<{ id: number }>('INSERT INTO todos(title, big, data) VALUES (:title, :big, :data) RETURNING id', { title: 'one', big, data: bytes });
    assert.equal(w.rowsAffected, 1);
    assert.equal(w.rows[0]!.id, 1);
    const r = await db.query<{ id: number; title: string; big: bigint; data: Uint8Array }>('SELECT id, title, big, data FROM todos');
    assert.deepEqual(r.columns, ['id', 'title', 'big', 'data']);
    assert.equal(r.rows[0]!.big, big, 'an integer past 2^53 comes back as the same bigint');
    assert.deepEqual([...r.rows[0]!.data], [...bytes], 'a blob comes back as the same bytes');
    assert.deepEqual(r.values[0]!.slice(0, 2), [1, 'one']);
    assert.equal((await db.query<{ n: number }>('SELECT count(*) AS n FROM todos WHERE big = ?', [big])).rows[0]!.n, 1, 'a bigint param binds exactly');

    // A batch is one transaction: the failing statement is named, nothing of it remains.
    const failed = await db.batch([{ sql: "INSERT INTO todos(title) VALUES ('two')" }, { sql: "INSERT INTO todos(title) VALUES ('one')" }]).catch((e) => e);
    assert.ok(failed instanceof ConstraintViolationError);
    assert.equal(failed.details?.statement, 1);
    assert.match(failed.requestId ?? '', /.+/);
    const both = await db.read([{ sql: 'SELECT count(*) AS n FROM todos' }, { sql: 'SELECT 2 AS two' }]);
    assert.deepEqual(both.results.map((x) => x.values[0]![0]), [1, 2]);
    await assert.rejects(db.query('DELETE FROM todos'), ReadOnlyError);
    await assert.rejects(db.query('WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c'), QueryTimeoutError);

    // The org host form resolves acme.localhost to loopback itself; database() addresses another database.
    const local = createClient({ url: `http://acme.localhost:${port}/web`, secret: p.secret('acme', 'web') });
    const status = await local.status();
    assert.equal(status.version, 2);
    assert.deepEqual(status.tables, [{ name: 'todos', rows: 1 }]);
    assert.equal((await local.database('other').status()).exists, false);
    await assert.rejects(createClient({ url: `http://other.localhost:${port}/web`, secret: p.secret('acme', 'web') }).status(), (e) => e instanceof ScopebaseError && e.code === 'unauthorized');
  } finally {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A loopback server answering each request with the next scripted reply ('hang' never answers). */
async function scripted(replies: ({ status: number; headers?: Record<string, string>; body: unknown } | 'hang')[]) {
  const seen: { host: string | undefined; path: string | undefined }[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push({ host: req.headers.host, path: req.url });
    const reply = replies[Math.min(seen.length - 1, replies.length - 1)]!;
    req.resume();
    if (reply === 'hang') return;
    res.writeHead(reply.status, { 'content-type': 'application/json', ...reply.headers }).end(JSON.stringify(reply.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    seen, port,
    client: (opts: { timeoutMs?: number; retries?: number } = {}) => createClient({ url: `http://127.0.0.1:${port}`, org: 'acme', repo: 'web', secret: 's', ...opts }),
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(r); }),
  };
}

const busy = (details?: Record<string, unknown>) => ({ status: 503, headers: { 'retry-after': '0' }, body: { error: { code: 'unavailable', message: 'busy', ...(details ? { details } : {}) } } });
const ok = { status: 200, body: { results: [{ columns: ['one'], rows: [[1]], rowsAffected: 1, lastInsertRowid: 7 }], version: 3 } };

test('retries only where safe: reads on 503/429 with Retry-After; a write only when the server says it did not commit', async () => {
  const read = await scripted([busy(), ok]);
  try {
    assert.deepEqual((await read.client().query('SELECT 1 AS one')).values, [[1]]);
    assert.equal(read.seen.length, 2, 'a refused read is tried again');
    assert.equal(read.seen[0]!.host, `acme.localhost:${read.port}`, 'the org host goes in Host');
    assert.equal(read.seen[0]!.path, '/web/_db/query');
  } finally {
    await read.close();
  }
  const write = await scripted([busy({ committed: null }), ok]);
  try {
    await assert.rejects(write.client().execute('INSERT INTO t VALUES (1)'), UnavailableError);
    assert.equal(write.seen.length, 1, 'a write that may have committed is never repeated');
  } finally {
    await write.close();
  }
  const notCommitted = await scripted([busy({ committed: false }), ok]);
  try {
    assert.equal((await notCommitted.client().execute('INSERT INTO t VALUES (1)')).lastInsertRowid, 7);
    assert.equal(notCommitted.seen.length, 2, 'details.committed === false makes a write safe to repeat');
  } finally {
    await notCommitted.close();
  }
  const limited = await scripted([{ status: 429, body: { error: { code: 'rate_limited', message: 'slow down' } } }, ok]);
  try {
    await assert.rejects(limited.client().query('SELECT 1'), RateLimitedError);
    assert.equal(limited.seen.length, 1, 'no Retry-After, no retry');
  } finally {
    await limited.close();
  }
  const always = await scripted([busy()]);
  try {
    await assert.rejects(always.client({ retries: 2 }).status(), UnavailableError);
    assert.equal(always.seen.length, 3, 'at most `retries` more attempts');
  } finally {
    await always.close();
  }
});

test('clients refused together with Retry-After: 1 come back after it, spread over the next half second', async () => {
  const times: number[] = [];
  let refused = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    if (refused < 8) {
      refused++;
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '1' }).end(JSON.stringify({ error: { code: 'rate_limited', message: 'slow down' } }));
      return;
    }
    times.push(performance.now());
    res.writeHead(ok.status, { 'content-type': 'application/json' }).end(JSON.stringify(ok.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const port = (server.address() as { port: number }).port;
    const t0 = performance.now();
    const clients = Array.from({ length: 8 }, () => createClient({ url: `http://127.0.0.1:${port}`, org: 'acme', repo: 'web', secret: 's' }));
    await Promise.all(clients.map((c) => c.query('SELECT 1 AS one')));
    const after = times.map((t) => t - t0).sort((a, b) => a - b);
    assert.equal(after.length, 8);
    assert.ok(after[0]! >= 1000, `none came back before Retry-After (first after ${after[0]!.toFixed(0)} ms)`);
    assert.ok(after[7]! < 1500 + 250, `all came back within Retry-After and half of it (last after ${after[7]!.toFixed(0)} ms)`);
    assert.ok(after[7]! - after[0]! > 50, `the retries are spread, not one burst (${after.map((t) => t.toFixed(0)).join(', ')} ms)`);
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
});

test('timeouts, AbortSignal and an unreachable server are typed errors, never a hang', async () => {
  const hang = await scripted(['hang']);
  try {
    await assert.rejects(hang.client({ timeoutMs: 200 }).status(), (e) => e instanceof TimeoutError && e.code === 'timeout');
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    await assert.rejects(hang.client().query('SELECT 1', undefined, { signal: controller.signal }), AbortError);
    await assert.rejects(hang.client().status({ signal: AbortSignal.abort() }), AbortError);
  } finally {
    await hang.close();
  }
  const gone = await scripted([ok]);
  await gone.close();
  const e = await gone.client().execute('INSERT INTO t VALUES (1)').catch((x) => x);
  assert.ok(e instanceof NetworkError, String(e));
  assert.equal(e.details?.sent, false, 'a refused connection says the request never went out');
  assert.throws(() => createClient({ url: 'http://127.0.0.1:1', secret: 's' }), /name the repo/);
  // An unset SCOPEBASE_SECRET: said at once, not sent and answered "wrong secret".
  assert.throws(() => createClient({ url: 'http://acme.localhost:1/web', secret: process.env.SCOPEBASE_NO_SUCH_VARIABLE! }), /`secret` is required .*SCOPEBASE_SECRET/);
  assert.throws(() => createClient({ url: 'http://acme.localhost:1/web', secret: '' }), /`secret` is required/);
});

test('the libSQL URL (…/web/_db/) given to createClient is refused at once, naming the repo URL that works', async () => {
  const p = await startProduct();
  try {
    const repoUrl = `http://acme.localhost:${new URL(p.url).port}/web`;
    for (const url of [`${repoUrl}/_db/`, `${repoUrl}/_db`]) {
      assert.throws(() => createClient({ url, secret: p.secret('acme', 'web') }), (e: Error) => e instanceof TypeError && e.message === `createClient: \`url\` is the repo's URL (${repoUrl}), without /_db/: that one is for libSQL clients`);
    }
    // Before: requests went to /web/_db/_db/query, and the 404 spoke of the libSQL protocol.
    assert.equal((await createClient({ url: repoUrl, secret: p.secret('acme', 'web') }).status()).database, 'main');
  } finally {
    await p.close();
  }
});

test('exportToFile and importFile stream a file of tens of MiB from and to disk, with progress up to the content length', async () => {
  const p = await startProduct();
  const dir = tempDir('scopebase-files-');
  mkdirSync(dir, { recursive: true });
  try {
    const db = createClient({ url: p.url, org: 'acme', repo: 'web', secret: p.secret('acme', 'web') });
    // ~24 MiB of rows, so the copy is far bigger than one socket buffer.
    await db.batch([
      { sql: 'CREATE TABLE big(id INTEGER PRIMARY KEY, body TEXT)' },
      { sql: "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 6000) INSERT INTO big SELECT i, printf('%.4000c', 'x') || i FROM n" },
    ]);
    const file = join(dir, 'big.sqlite');
    const seen: [number, number | null][] = [];
    const out = await db.exportToFile(file, { onProgress: (done, total) => seen.push([done, total]) });
    assert.equal(out.size, statSync(file).size);
    assert.ok(out.size > 20 << 20, `a big file: ${out.size}`);
    assert.equal(out.version, 1);
    assert.ok(seen.length > 10, 'progress came in steps');
    assert.deepEqual(seen.at(-1), [out.size, out.size], 'the last step is the whole file, against its content length');
    assert.ok(seen.every(([d], i) => i === 0 || d > seen[i - 1]![0]), 'monotonic');

    const sent: number[] = [];
    const imported = await db.database('copy').importFile(file, { onProgress: (done, total) => { assert.equal(total, out.size); sent.push(done); } });
    assert.equal(imported.format, 'sqlite', 'told from its first bytes');
    assert.deepEqual(imported.tables, [{ name: 'big', rows: 6000 }]);
    assert.equal(sent.at(-1), out.size);
    const check = await db.database('copy').query<{ n: number; last: string }>("SELECT count(*) AS n, max(substr(body, 4001)) AS last FROM big");
    assert.deepEqual(check.rows[0], { n: 6000, last: '999' });
    await assert.rejects(db.importFile(join(dir, 'missing.sqlite')), (e) => e instanceof ScopebaseError && /cannot read .*missing\.sqlite: ENOENT/.test(e.message));
  } finally {
    rmSync(dir, { recursive: true, force: true });
    await p.close();
  }
});
