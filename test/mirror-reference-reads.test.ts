// The reference mirror's read side as SPEC 6 gives it to a caller: 4.3's contract and limits, writes refused as a
// read replica refuses them, and every database of the source readable, heard of by an event or not.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { call, startProduct, type Product } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { newSecret } from './helpers/mirror.ts';

/** The product with its reference mirror; `listed` puts the mirror in DB_MIRRORS (else it hears no event at all). */
async function withMirror(env: Record<string, string>, listed = true): Promise<{ p: Product; mirror: (path: string, body: unknown, opts?: { secret?: string | null; raw?: Buffer; type?: string }) => ReturnType<typeof call> }> {
  const secret = newSecret();
  const port = await freePort();
  const p = await startProduct({
    MIRROR_PORT: String(port), MIRROR_SECRET: secret, DB_MIRROR_MAX_BACKOFF_MS: '100', ...env,
    ...(listed ? { DB_MIRRORS: JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${port}/hook`, secret }]) } : {}),
  });
  const mirror = (path: string, body: unknown, opts: { secret?: string | null; raw?: Buffer; type?: string } = {}) => {
    const s = opts.secret === undefined ? p.secret('acme', 'web') : opts.secret;
    const headers: Record<string, string> = { ...(s === null ? {} : { authorization: `Bearer ${s}` }), ...(opts.type ? { 'content-type': opts.type } : {}) };
    return call(p.running.mirrorUrl!, p.config.baseDomain, path, opts.raw ? { method: 'POST', rawBody: opts.raw, headers } : { body, headers });
  };
  return { p, mirror };
}

test('a read past DB_MAX_BODY_BYTES is 413 payload_too_large on the mirror as on the primary (it was read and answered)', async (t) => {
  const { p, mirror } = await withMirror({ DB_MAX_BODY_BYTES: '20000' });
  t.after(() => p.close());
  const w = await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  assert.equal((await mirror('/web/_db/query', { sql: 'SELECT 1', minVersion: w.json.version })).status, 200);
  const big = { sql: 'SELECT length(?)', params: ['x'.repeat(30_000)] };
  const primary = await p.db('web', 'query', big);
  const replica = await mirror('/web/_db/query', big);
  assert.equal(primary.status, 413, primary.text);
  assert.equal(replica.status, 413, replica.text);
  assert.equal(replica.json.error.code, 'payload_too_large');
  assert.equal((await mirror('/web/_db/query', { sql: 'SELECT length(?)', params: ['x'.repeat(10_000)] })).status, 200);
});

test('writes sent to the mirror are refused as read_only naming the primary, nothing applied; its other /_db/ paths are the primary\'s', async (t) => {
  const { p, mirror } = await withMirror({});
  t.after(() => p.close());
  const w = await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' });
  assert.equal((await mirror('/web/_db/query', { sql: 'SELECT 1', minVersion: w.json.version })).status, 200);
  const writes: [string, unknown][] = [
    ['execute', { sql: "INSERT INTO t (v) VALUES ('x')" }],
    ['migrate', { migrations: [{ id: '0001', sql: 'CREATE TABLE u (a)' }] }],
    ['restore', { toVersion: 0 }],
  ];
  for (const [op, body] of writes) {
    const r = await mirror(`/web/_db/${op}`, body);
    assert.equal(r.status, 400, `${op}: ${r.text}`);
    assert.equal(r.json.error.code, 'read_only');
    assert.match(r.json.error.message, new RegExp(`read replica.*POST /web/_db/query only; send /_db/${op} to the primary`));
    assert.ok(r.headers['x-request-id']);
  }
  const imported = await mirror('/web/_db/import?mode=replace', undefined, { raw: Buffer.from('CREATE TABLE z (a);'), type: 'application/sql' });
  assert.equal(imported.json.error.code, 'read_only', imported.text);
  for (const op of ['status', 'changes', 'snapshot', 'export', 'nope']) {
    const r = await mirror(`/web/_db/${op}`, {});
    assert.equal(r.status, 404, `${op}: ${r.text}`);
    assert.equal(r.json.error.code, 'not_found');
    assert.match(r.json.error.message, new RegExp(`answers POST /web/_db/query only; /_db/${op} is served by the primary`));
  }
  // Names first, then the secret, as everywhere (SPEC 2, 4.1).
  assert.equal((await mirror('/_web/_db/execute', {}, { secret: 'wrong' })).json.error.code, 'invalid_name');
  const stranger = await mirror('/web/_db/execute', { sql: 'DELETE FROM t' }, { secret: p.secret('acme', 'other') });
  assert.equal(stranger.status, 401);
  assert.equal(stranger.headers['www-authenticate'], 'Bearer');
  // Nothing happened anywhere.
  assert.equal((await p.db('web', 'status', {})).json.version, w.json.version);
  const read = await mirror('/web/_db/query', { sql: "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' ORDER BY name" });
  assert.deepEqual(read.json.results[0].rows, [['t']]);
  assert.equal(read.json.version, w.json.version);
});

test('a database the mirror never had an event of is read from a snapshot of the source; one the source lacks is 404 at once', async (t) => {
  // Not in DB_MIRRORS: the mirror hears no event, as when its DATA_DIR is new while delivery had acknowledged everything.
  const { p, mirror } = await withMirror({}, false);
  t.after(() => p.close());
  const w = await p.db('web', 'execute', { statements: [{ sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' }, { sql: "INSERT INTO t (v) VALUES ('written before')" }] });
  const read = await mirror('/web/_db/query', { sql: 'SELECT v FROM t', minVersion: w.json.version });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json, { results: [{ columns: ['v'], rows: [['written before']] }], version: w.json.version });
  // A database at version 0 (made by a request that changed nothing: no event is ever sent for it).
  assert.equal((await p.db('web', 'execute', { database: 'empty', sql: 'SELECT 1' })).json.version, 0);
  const started = Date.now();
  const empty = await mirror('/web/_db/query', { database: 'empty', sql: 'SELECT 1', minVersion: 0 });
  assert.equal(empty.status, 200, empty.text);
  assert.equal(empty.json.version, 0);
  const missing = await mirror('/web/_db/query', { database: 'nope', sql: 'SELECT 1', minVersion: 1 });
  assert.equal(missing.status, 404, missing.text);
  assert.equal(missing.json.error.code, 'database_not_found');
  assert.ok(Date.now() - started < 3000, `answered in ${Date.now() - started} ms, not after the minVersion wait`);
  assert.equal((await mirror('/web/_db/query', { database: 'nope', sql: 'SELECT 1' })).json.error.code, 'database_not_found');
});

test('serve mirror without MIRROR_SOURCE_URL refuses to start, naming it (it could make no replica: every event was 503)', async () => {
  const started = await startProduct({ MIRROR_PORT: '0', MIRROR_SECRET: newSecret() }, 'mirror').catch((e: Error) => e);
  if (!(started instanceof Error)) await started.close();
  assert.match(String(started), /MIRROR_SOURCE_URL: required to run the reference mirror alone \(without it every event is answered 503\)/);
});

test('a mirror whose RUNTIME_ROOT_KEY is not the source\'s says so: the 401 it gets for snapshots names the key', async (t) => {
  const source = await startProduct();
  const otherKey = 'c'.repeat(64);
  const m = await startProduct({ MIRROR_PORT: '0', MIRROR_SECRET: newSecret(), MIRROR_SOURCE_URL: source.url, RUNTIME_ROOT_KEY: otherKey }, 'mirror');
  t.after(async () => {
    await m.close();
    await source.close();
  });
  await source.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  const r = await m.call('/web/_db/query', { body: { sql: 'SELECT 1' }, headers: { authorization: `Bearer ${m.secret('acme', 'web')}` } });
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error.code, 'unavailable');
  assert.match(r.json.error.message, /the snapshot source answered 401 unauthorized: it refuses the secrets this mirror derives from its RUNTIME_ROOT_KEY; give the mirror the source's RUNTIME_ROOT_KEY/);
  assert.doesNotMatch(r.text, new RegExp(`${otherKey}|${'a'.repeat(64)}`));
});

test('first reads of many databases of one repo at once: the source\'s 503 for its 4 snapshots per repo is waited out, not passed on', async (t) => {
  const { p, mirror } = await withMirror({}, false);
  t.after(() => p.close());
  const names = Array.from({ length: 8 }, (_, i) => `d${i}`);
  for (const database of names) await p.db('web', 'execute', { database, sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  const reads = await Promise.all(names.map((database) => mirror('/web/_db/query', { database, sql: 'SELECT count(*) FROM t' })));
  // (A loaded machine may still answer some read 503 from the mirror's own executors; never for the source's limit.)
  for (const r of reads) assert.doesNotMatch(r.text, /snapshot source answered 503/);
  for (const database of names) assert.equal((await mirror('/web/_db/query', { database, sql: 'SELECT count(*) FROM t' })).status, 200);
});

test('a read with minVersion that no hook brings pulls the source\'s change log: a lagging mirror answers in about a second, not 503', async (t) => {
  // Not in DB_MIRRORS: no hook ever comes, as for a mirror back from an outage while the sender waits out its backoff.
  const { p, mirror } = await withMirror({}, false);
  t.after(() => p.close());
  const first = await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)' });
  assert.equal((await mirror('/web/_db/query', { sql: 'SELECT 1', minVersion: first.json.version })).status, 200); // bootstrapped at 1
  let last = first;
  for (const v of ['a', 'b', 'c']) last = await p.db('web', 'execute', { sql: 'INSERT INTO t (v) VALUES (?)', params: [v] });
  await p.db('web', 'execute', { statements: [{ sql: 'ALTER TABLE t ADD COLUMN w' }, { sql: "UPDATE t SET w = v || v WHERE v = 'b'" }] });
  last = await p.db('web', 'execute', { sql: "DELETE FROM t WHERE v = 'a'" });
  assert.equal((await mirror('/web/_db/query', { sql: 'SELECT count(*) FROM t' })).json.version, first.json.version, 'premise: behind, nothing pushed');
  const started = Date.now();
  const read = await mirror('/web/_db/query', { sql: 'SELECT v, w FROM t ORDER BY id', minVersion: last.json.version });
  assert.equal(read.status, 200, read.text);
  assert.deepEqual(read.json, { results: [{ columns: ['v', 'w'], rows: [['b', 'bb'], ['c', null]] }], version: last.json.version });
  assert.ok(Date.now() - started < 4000, `took ${Date.now() - started} ms`);
  // Past what the source has: nothing to pull, the bounded wait ends in 503 as before.
  const late = await mirror('/web/_db/query', { sql: 'SELECT 1', minVersion: last.json.version + 1 });
  assert.equal(late.status, 503);
  assert.equal(late.headers['retry-after'], '1');
});
