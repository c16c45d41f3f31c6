// SPEC 3 from the outside: every code of its table through the proxy over real HTTP, each with the table's status,
// the one shape ({"error": {code, message, details?}}), JSON, and the caller's x-request-id echoed.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type CallOptions, type HttpResult, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';
import { setupWrite } from './helpers/runaway.ts';

let p: Product;
before(async () => {
  p = await startProduct({
    DB_MAX_STATEMENTS: '3', DB_MAX_RESULT_BYTES: '4096', DB_QUERY_TIMEOUT_MS: '300', DB_MAX_DATABASES_PER_REPO: '2', DB_MAX_BODY_BYTES: String(64 * 1024),
    DB_QUEUE_TIMEOUT_MS: '10000', // a loaded machine's slow executor start after the runaway is no 503 here: queueing is not this file's subject
  });
  const setup = await setupWrite(() => p.db('web', 'migrate', { migrations: [{ id: '0001_users', sql: 'CREATE TABLE users(id INTEGER PRIMARY KEY, email TEXT UNIQUE, age INTEGER CHECK (age >= 0), name TEXT NOT NULL DEFAULT \'x\', boss INTEGER REFERENCES users(id))' }] }));
  assert.equal(setup.status, 200, setup.text);
});
after(() => p.close());

let n = 0;
/** Sends with a fresh x-request-id and checks the answer echoes it. */
async function traced(send: (opts: CallOptions) => Promise<HttpResult>): Promise<HttpResult> {
  const id = `spec3-${++n}`;
  const r = await send({ headers: { 'x-request-id': id } });
  assert.equal(r.headers['x-request-id'], id, `x-request-id echoed: ${r.text.slice(0, 200)}`);
  return r;
}

describe('each code of the table with its status (SPEC 3)', () => {
  const cases: [string, number, (o: CallOptions) => Promise<HttpResult>][] = [
    ['invalid_request', 400, (o) => p.db('web', 'query', undefined, { ...o, rawBody: '{"sql": ' })],
    ['invalid_request', 400, (o) => p.db('web', 'query', { sql: 42 }, o)],
    ['invalid_name', 400, (o) => p.db('-web', 'query', { sql: 'SELECT 1' }, o)],
    ['invalid_name', 400, (o) => p.db('web', 'query', { database: 'Main', sql: 'SELECT 1' }, o)],
    ['sql_error', 400, (o) => p.db('web', 'query', { sql: 'SELEC 1' }, o)],
    ['sql_error', 400, (o) => p.db('web', 'query', { sql: 'SELECT * FROM no_such_table' }, o)],
    ['read_only', 400, (o) => p.db('web', 'query', { sql: "INSERT INTO users(email) VALUES ('r@o')" }, o)],
    ['not_allowed', 400, (o) => p.db('web', 'execute', { sql: "ATTACH DATABASE 'x.db' AS x" }, o)],
    ['unauthorized', 401, (o) => p.db('web', 'query', { sql: 'SELECT 1' }, { ...o, secret: null })],
    ['unauthorized', 401, (o) => p.db('web', 'query', { sql: 'SELECT 1' }, { ...o, secret: 'not-the-secret' })],
    ['unauthenticated', 401, (o) => p.call('/web/_account/verify', o)],
    ['database_not_found', 404, (o) => p.db('web', 'query', { database: 'absent', sql: 'SELECT 1' }, o)],
    ['database_not_found', 404, (o) => p.db('web', 'snapshot', { database: 'absent' }, o)],
    ['not_found', 404, (o) => p.db('web', 'frobnicate', {}, o)],
    ['unknown_host', 404, (o) => p.call('/web/_db/status', { ...o, host: 'acme.elsewhere.example' })],
    ['constraint_violation', 409, (o) => p.db('web', 'execute', { sql: 'INSERT INTO users(age) VALUES (-1)' }, o)],
    ['migration_conflict', 409, (o) => p.db('web', 'migrate', { migrations: [{ id: '0001_users', sql: 'CREATE TABLE other(x)' }] }, o)],
    ['payload_too_large', 413, (o) => p.db('web', 'query', { statements: Array.from({ length: 4 }, () => ({ sql: 'SELECT 1' })) }, o)],
    ['payload_too_large', 413, (o) => p.db('web', 'query', { sql: 'SELECT ?', params: ['x'.repeat(70 * 1024)] }, o)],
    ['result_too_large', 413, (o) => p.db('web', 'query', { sql: 'SELECT zeroblob(8000)' }, o)],
    ['query_timeout', 422, (o) => p.db('web', 'query', { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' }, o)],
  ];
  for (const [code, status, send] of cases) {
    test(`${status} ${code}`, async () => {
      const r = await traced(send);
      assertSpecError(r, status, code);
      if (code === 'unauthorized') assert.match(String(r.headers['www-authenticate']), /^Bearer\b/);
    });
  }

  test('507 quota_exceeded: the database past DB_MAX_DATABASES_PER_REPO is refused and not made', async () => {
    for (const database of ['one', 'two']) assert.equal((await setupWrite(() => p.db('many', 'execute', { database, sql: 'CREATE TABLE t(x)' }))).status, 200);
    const r = await traced((o) => p.db('many', 'execute', { database: 'three', sql: 'CREATE TABLE t(x)' }, o));
    assertSpecError(r, 507, 'quota_exceeded');
    assert.equal((await p.db('many', 'status', { database: 'three' })).json.exists, false);
  });
});

describe('no such route is 404 not_found, an unknown /_db/<op> included', () => {
  test('an op in other letters, with a path after it, or none at all; and a reserved path under a repo', async () => {
    for (const path of ['/web/_db', '/web/_db/', '/web/_db/Query', '/web/_db/QUERY', '/web/_db/query/extra', '/web/_db/status.json']) {
      assertSpecError(await p.call(path, { method: 'POST', body: {}, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } }), 404, 'not_found', path);
    }
    assertSpecError(await p.call('/web/_nothing/here'), 404, 'not_found');
  });
});

describe('413 payload_too_large at the body limit exactly', () => {
  test('a body of DB_MAX_BODY_BYTES is read; one byte more is 413', async () => {
    const sized = (n: number) => `{"sql":"SELECT 1"${' '.repeat(n - 18)}}`; // JSON whitespace: n bytes in all
    const at = await p.db('web', 'query', undefined, { rawBody: sized(64 * 1024) });
    assert.equal(at.status, 200, at.text);
    assertSpecError(await p.db('web', 'query', undefined, { rawBody: sized(64 * 1024 + 1) }), 413, 'payload_too_large');
  });
});

describe('the example of SPEC 3: a UNIQUE violation in a batch', () => {
  test('409 constraint_violation, SQLite\'s message, details.statement and details.sqliteCode', async () => {
    const r = await p.db('web', 'execute', { statements: [{ sql: "INSERT INTO users(email) VALUES ('a@example.com')" }, { sql: "INSERT INTO users(email) VALUES ('a@example.com')" }] });
    const e = assertSpecError(r, 409, 'constraint_violation');
    assert.match(e.message, /UNIQUE constraint failed: users\.email/);
    assert.equal(e.details?.statement, 1);
    assert.equal(e.details?.sqliteCode, 'SQLITE_CONSTRAINT_UNIQUE');
  });

  test('FOREIGN KEY, CHECK and NOT NULL are constraint_violation too, each with its SQLite code', async () => {
    const cases: [string, string][] = [
      ['INSERT INTO users(boss) VALUES (999)', 'SQLITE_CONSTRAINT_FOREIGNKEY'],
      ['INSERT INTO users(age) VALUES (-5)', 'SQLITE_CONSTRAINT_CHECK'],
      ['INSERT INTO users(name) VALUES (NULL)', 'SQLITE_CONSTRAINT_NOTNULL'],
    ];
    for (const [sql, sqliteCode] of cases) {
      const e = assertSpecError(await p.db('web', 'execute', { sql }), 409, 'constraint_violation', sql);
      assert.equal(e.details?.sqliteCode, sqliteCode, sql);
      assert.equal(e.details?.statement, 0, sql);
    }
  });
});

describe('x-request-id on every response (SPEC 3)', () => {
  test('successes and failures of every part: database, account, landing, unknown host, no route; a fresh id when none was sent', async () => {
    const sends: ((o: CallOptions) => Promise<HttpResult>)[] = [
      (o) => p.db('web', 'status', {}, o),
      (o) => p.db('web', 'query', { sql: 'SELECT 1' }, o),
      (o) => p.db('web', 'snapshot', {}, o),
      (o) => p.call('/web/_account/verify', o),
      (o) => p.call('/web/_account/login', o),
      (o) => p.call('/web/', o),
      (o) => p.call('/', o),
      (o) => p.call('/web/_db/v2', o),
      (o) => p.call('/web/_nope/x', o),
      (o) => p.call('/x', { ...o, host: 'nowhere.example' }),
    ];
    for (const send of sends) {
      await traced(send);
      const fresh = await send({});
      assert.ok(String(fresh.headers['x-request-id'] ?? '').length > 0, `a fresh id: ${fresh.status} ${fresh.text.slice(0, 100)}`);
    }
  });
});
