// SPEC 2, 3, 4.1 and 8 through the proxy: names, hosts, secrets, routing, request ids and the error shape.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createHmac } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { gzipSync } from 'node:zlib';
import { request as undiciRequest } from 'undici';
import { ROOT_KEY, startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct();
  await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
});
after(() => p.close());

const isErrorShape = (json: unknown) => {
  const e = (json as { error?: { code?: unknown; message?: unknown } }).error;
  return typeof e?.code === 'string' && typeof e.message === 'string';
};

describe('shared secrets (4.1)', () => {
  test('the secret is base64url(HMAC-SHA256(rootKey, "db:org/repo")) and `scopebase secret` prints it', async () => {
    const expected = createHmac('sha256', Buffer.from(ROOT_KEY, 'hex')).update('db:acme/web').digest('base64url');
    assert.equal(p.secret('acme', 'web'), expected);
    const { execFileSync } = await import('node:child_process');
    const out = execFileSync(process.execPath, ['src/cli/main.ts', 'secret', 'ACME/Web'], { env: { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, DATA_DIR: p.dataDir } }).toString().trim();
    assert.equal(out, expected);
  });

  const cases: [string, Record<string, string>][] = [
    ['missing', {}],
    ['not bearer', { authorization: `Basic ${p?.secret?.('acme', 'web') ?? 'x'}` }],
    ['wrong', { authorization: 'Bearer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' }],
  ];
  for (const [name, headers] of cases) {
    test(`${name} secret: 401 unauthorized with WWW-Authenticate: Bearer`, async () => {
      const r = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: null, headers });
      assert.equal(r.status, 401);
      assert.equal(r.json.error.code, 'unauthorized');
      assert.equal(r.headers['www-authenticate'], 'Bearer');
    });
  }

  test('another repo\'s secret opens nothing here', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: p.secret('acme', 'other') });
    assert.equal(r.status, 401);
  });

  test('another org\'s secret for the same repo name opens nothing', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: p.secret('globex', 'web') });
    assert.equal(r.status, 401);
    const r2 = await p.db('web', 'query', { sql: 'SELECT 1' }, { org: 'globex', secret: p.secret('acme', 'web') });
    assert.equal(r2.status, 401);
  });

  test('the root key itself is never accepted over the wire', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: ROOT_KEY });
    assert.equal(r.status, 401);
  });

  test('org and repo are lowercased: the same secret opens ACME.localhost/WEB', async () => {
    const r = await p.db('WEB', 'query', { sql: 'SELECT count(*) FROM t' }, { host: `ACME.localhost:${new URL(p.url).port}`, secret: p.secret('acme', 'web') });
    assert.equal(r.status, 200, r.text);
  });
});

describe('names and hosts (2)', () => {
  const badRepos = ['..', '%2e%2e', '_db', '_account', 'a'.repeat(200), '-x', 'a%2Fb', 'a b'];
  for (const repo of badRepos) {
    test(`repo ${repo.slice(0, 20)}: 400 invalid_name before auth`, async () => {
      const r = await p.db(repo, 'status', {}, { secret: null });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.code, 'invalid_name');
    });
  }

  for (const database of ['Main', '../x', 'a'.repeat(65), '', '_x', 'a.b']) {
    test(`database ${JSON.stringify(database.slice(0, 20))}: 400 invalid_name before auth`, async () => {
      const r = await p.db('web', 'execute', { database, sql: 'CREATE TABLE x(a)' }, { secret: null });
      assert.equal(r.status, 400);
      assert.equal(r.json.error.code, 'invalid_name');
    });
  }

  test('a database name of the wrong type is invalid_request', async () => {
    const r = await p.db('web', 'query', { database: 5, sql: 'SELECT 1' });
    assert.equal(r.json.error.code, 'invalid_request');
  });

  test('no bad name left a file or folder behind', () => {
    const root = join(p.dataDir, 'db');
    assert.deepEqual(readdirSync(root), ['acme']);
    assert.deepEqual(readdirSync(join(root, 'acme')).sort(), ['web']);
    assert.equal(existsSync(join(root, '..', 'x.sqlite')), false);
  });

  test('a host that is not {label}.BASE_DOMAIN is 404 unknown_host', async () => {
    const port = new URL(p.url).port;
    for (const host of ['localhost', `a.b.localhost:${port}`, 'example.com', `acme.localhost.evil.com`, '127.0.0.1']) {
      const r = await p.db('web', 'status', {}, { host });
      assert.equal(r.status, 404, host);
      assert.equal(r.json.error.code, 'unknown_host', host);
    }
  });

  test('an org label that breaks the rule is 400 invalid_name', async () => {
    const r = await p.db('web', 'status', {}, { host: `-bad-.localhost:${new URL(p.url).port}` });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_name');
  });

  test('a port in Host is ignored; one that is no port (empty, past 65535, 6 digits, letters) is 400 invalid_request', async () => {
    for (const host of ['acme.localhost:1', 'acme.localhost:65535', 'acme.localhost:08481']) {
      const r = await p.db('web', 'status', {}, { host });
      assert.equal(r.status, 200, `${host}: ${r.text}`);
    }
    for (const host of ['acme.localhost:', 'acme.localhost:018481', 'acme.localhost:99999', 'acme.localhost:80a']) {
      const r = await p.db('web', 'status', {}, { host });
      assert.equal(r.status, 400, `${host}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request'); // more cases on every listener: test/host-malformed.test.ts
    }
  });

  test('Unicode look-alikes do not fold into a valid name: KELVIN SIGN is no "k"', async () => {
    // U+212A lowercases to an ASCII "k": `\u212Aey` would open repo "key", and a WAF rule on /key would not see it.
    const repo = await p.db('%E2%84%AAey', 'status', {}, { secret: p.secret('acme', 'key') });
    assert.equal(repo.status, 400, repo.text);
    assert.equal(repo.json.error.code, 'invalid_name');
    // The same in Host, as the UTF-8 bytes a client sends (Node reads header bytes as Latin-1).
    const host = Buffer.from('\u212Aacme.localhost', 'utf8').toString('latin1');
    const org = await p.db('web', 'status', {}, { host, secret: p.secret('kacme', 'web') });
    assert.equal(org.status, 400, org.text);
    assert.equal(org.json.error.code, 'invalid_name');
  });
});

describe('routing, request ids and the error shape (3, 8)', () => {
  test('an unknown /_db/<op> is 404 not_found', async () => {
    const r = await p.db('web', 'drop', {});
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'not_found');
  });

  test('GET on a /_db route is 404 not_found: an operation takes POST, anything else is no operation', async () => {
    const r = await p.call('/web/_db/query');
    assert.equal(r.status, 404);
    assert.ok(isErrorShape(r.json));
    assert.match(r.json.error.message, /\/_db\/query takes POST/);
    // Every other method says the same, not "no route" (OPTIONS did; a pipeline path too).
    for (const [method, path] of [['OPTIONS', '/web/_db/query'], ['DELETE', '/web/_db/execute'], ['PUT', '/web/_db/v2/pipeline'], ['OPTIONS', '/web/_db/v3/pipeline']]) {
      const m = await p.call(path!, { method });
      assert.equal(m.status, 404, `${method} ${path}`);
      assert.match(m.json.error.message, /takes POST/, `${method} ${path}: ${m.text}`);
    }
    const v1 = await p.call('/web/_db/v1');
    assert.equal(v1.status, 404);
    assert.match(v1.json.error.message, /unknown operation \/_db\/v1/);
  });

  test('a query string on a JSON operation is refused, not read as nothing (the database goes in the body)', async () => {
    const auth = { authorization: `Bearer ${p.secret('acme', 'web')}` };
    for (const op of ['query', 'execute', 'status', 'export', 'changes']) {
      const r = await p.call(`/web/_db/${op}?database=other`, { body: { sql: 'SELECT 1' }, headers: auth });
      assert.equal(r.status, 400, `${op}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, new RegExp(`/_db/${op} reads no query string: send "database"`));
    }
  });

  // Before: 200, the statements run on main (a table meant for `other` created there).
  test('?database= on a libSQL pipeline path is refused, not read as nothing (the database goes in the path)', async () => {
    const auth = { authorization: `Bearer ${p.secret('acme', 'web')}` };
    const body = { requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE meant_for_other(x)' } }, { type: 'close' }] };
    for (const path of ['/web/_db/v2/pipeline?database=other', '/web/_db/v3/pipeline?tls=0&database=other', '/web/_db/main/v3/pipeline?database=other']) {
      const r = await p.call(path, { body, headers: auth });
      assert.equal(r.status, 400, `${path}: ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, /the libSQL protocol names its database in the path, not in \?database=: \/_db\/\{database\}\/v[23]\/pipeline/);
    }
    const tables = await p.db('web', 'status', {});
    assert.ok(!JSON.stringify(tables.json).includes('meant_for_other'), tables.text);
  });

  test('every response carries x-request-id, echoed when the caller sent one', async () => {
    const a = await p.db('web', 'status', {});
    assert.match(String(a.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    const b = await p.db('web', 'status', {}, { headers: { 'x-request-id': 'trace-123' } });
    assert.equal(b.headers['x-request-id'], 'trace-123');
    const c = await p.db('web', 'nope', {}, { headers: { 'x-request-id': 'trace-404' } });
    assert.equal(c.headers['x-request-id'], 'trace-404');
    // Any printable ASCII up to 200 characters, as tracing systems write ids; else a fresh one, never a cut one.
    for (const id of ['Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1', 'a b<>"/+={}', 'x'.repeat(200)]) {
      const r = await p.db('web', 'status', {}, { headers: { 'x-request-id': id } });
      assert.equal(r.headers['x-request-id'], id);
    }
    for (const id of ['x'.repeat(201), 'caf\u00e9']) {
      const r = await p.db('web', 'status', {}, { headers: { 'x-request-id': Buffer.from(id).toString('latin1') } });
      assert.match(String(r.headers['x-request-id']), /^[0-9a-f-]{36}$/, id.slice(0, 20));
    }
  });

  test('malformed JSON, wrong types and unknown fields are invalid_request', async () => {
    const bodies: (string | object)[] = ['{', '[]', '"x"', 'null', { sql: 5 }, { sql: '' }, { statements: [] }, { statements: 'x' }, { statements: [{ sql: 'SELECT 1', extra: 1 }] }, { sql: 'SELECT 1', statements: [{ sql: 'SELECT 1' }] }, { sql: 'SELECT 1', params: 'x' }, { sql: 'SELECT 1', rows: 'maps' }, { sql: 'SELECT 1', colour: 'blue' }];
    for (const b of bodies) {
      const r = await p.db('web', 'query', undefined, { rawBody: typeof b === 'string' ? b : JSON.stringify(b) });
      assert.equal(r.status, 400, JSON.stringify(b));
      assert.equal(r.json.error.code, 'invalid_request', JSON.stringify(b));
    }
  });

  test('a body that is not exactly what was meant is refused, never stored altered: invalid UTF-8, a lone surrogate, a Content-Encoding', async () => {
    const before = (await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' })).json.results[0].rows[0][0];
    // A lone surrogate (\ud83d without its pair) used to be stored as U+FFFD without a word.
    for (const raw of ['{"sql":"INSERT INTO t VALUES (?)","params":["a\\ud83d"]}', '{"sql":"INSERT INTO t VALUES (\'\\udc00\')"}', '{"sql":"INSERT INTO t VALUES (1)","\\ud800":1}']) {
      const r = await p.db('web', 'execute', undefined, { rawBody: raw });
      assert.equal(r.status, 400, raw);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, /lone UTF-16 surrogate/);
    }
    const latin1 = await p.db('web', 'execute', undefined, { rawBody: Buffer.concat([Buffer.from('{"sql":"INSERT INTO t VALUES (?)","params":["caf'), Buffer.from([0xe9]), Buffer.from('"]}')]) });
    assert.equal(latin1.status, 400);
    assert.match(latin1.json.error.message, /not valid UTF-8/);
    // Compressed bytes used to be read as the body itself ("malformed JSON"); now the coding is named, and the import too.
    const gz = await p.db('web', 'execute', undefined, { rawBody: gzipSync('{"sql":"INSERT INTO t VALUES (1)"}'), headers: { 'content-encoding': 'gzip' } });
    assert.equal(gz.status, 400);
    assert.match(gz.json.error.message, /Content-Encoding/);
    assert.equal(gz.headers['accept-encoding'], 'identity');
    const imported = await p.call('/web/_db/import?database=gz&mode=create', {
      method: 'POST', rawBody: gzipSync('CREATE TABLE a(x);'), headers: { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/sql', 'content-encoding': 'gzip' },
    });
    assert.equal(imported.status, 400, imported.text);
    assert.match(imported.json.error.message, /Content-Encoding/);
    assert.equal((await p.db('web', 'query', { database: 'gz', sql: 'SELECT 1' })).status, 404, 'the import made nothing');
    assert.deepEqual((await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' })).json.results[0].rows[0][0], before, 'nothing of them was stored');
    // What is meant goes through: a whole surrogate pair, identity coding, any character as UTF-8.
    const ok = await p.db('web', 'execute', undefined, { rawBody: '{"sql":"SELECT ?, ?","params":["\\ud83d\\ude00","é"]}', headers: { 'content-encoding': 'identity' } });
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json.results[0].rows, [['😀', 'é']]);
  });

  test('two x-request-id headers are no id: the answer carries a fresh one, not the two joined', async () => {
    const r = await undiciRequest(`${p.url}/web/_db/status`, {
      method: 'POST', body: '{}', headers: ['host', 'acme.localhost', 'authorization', `Bearer ${p.secret('acme', 'web')}`, 'content-type', 'application/json', 'x-request-id', 'one', 'x-request-id', 'two'],
    });
    await r.body.text();
    assert.equal(r.statusCode, 200);
    assert.match(String(r.headers['x-request-id']), /^[0-9a-f-]{36}$/);
  });

  test('a body over the limit is 413 payload_too_large', async () => {
    const big = await startProduct({ DB_MAX_BODY_BYTES: '2048' });
    try {
      const r = await big.db('web', 'execute', { sql: 'SELECT ?', params: ['x'.repeat(4096)] });
      assert.equal(r.status, 413);
      assert.equal(r.json.error.code, 'payload_too_large');
      assert.equal(r.json.error.message, 'request body is over the size limit of 2048 bytes', 'it says how much is allowed');
      assert.deepEqual(r.json.error.details, { limitBytes: 2048 });
      // Without a Content-Length (chunked), the limit is enforced while the body streams in.
      const chunked = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const req = httpRequest(`${big.url}/web/_db/execute`, { method: 'POST', headers: { host: 'acme.localhost', authorization: `Bearer ${big.secret('acme', 'web')}` } }, (res) => {
          let body = '';
          res.on('data', (d) => (body += d));
          res.on('end', () => resolve({ status: res.statusCode!, body }));
        });
        req.on('error', reject);
        for (let i = 0; i < 8; i++) req.write('x'.repeat(512));
        req.end();
      });
      assert.equal(chunked.status, 413);
      assert.equal(JSON.parse(chunked.body).error.code, 'payload_too_large');
      assert.equal((await big.db('web', 'status', {})).status, 200, 'the server still answers');
    } finally {
      await big.close();
    }
  });

  test('the JSON body works with curl -d\'s form content type', async () => {
    const r = await p.db('web', 'query', undefined, { rawBody: '{"sql":"SELECT 1"}', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    assert.equal(r.status, 200);
  });

  test('client-sent internal headers are dropped by the proxy', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: null, headers: { 'x-scopebase-org': 'acme', 'x-scopebase-proxy-token': 'x', 'x-auth-user-id': 'admin' } });
    assert.equal(r.status, 401);
  });
});
