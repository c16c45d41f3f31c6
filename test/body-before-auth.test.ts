// A request's host, names and secret are checked on its headers, before its body is read; bodies held in memory are
// bounded process-wide (MAX_BODY_BYTES_IN_FLIGHT). docs/security.md, "Request bodies". Raw sockets on loopback
// against the real product: a large declared Content-Length and only part of the body, answered before the rest.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { newSecret } from './helpers/mirror.ts';
import { partial } from './helpers/partial-body.ts';
import { ROOT_KEY, startProduct, type Product } from './helpers/product.ts';
import { proxyToken } from '../src/db/remote.ts';

const MiB = 1024 * 1024;
let p: Product;
let port: string;
const wrong = 'Bearer AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';

function head(method: string, path: string, host: string, headers: Record<string, string>, toPort = port): string {
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  return `${method} ${path} HTTP/1.1\r\nHost: ${host}:${toPort}\r\n${lines}\r\n`;
}

async function metric(name: string): Promise<number> {
  const res = await request(`${p.running.adminUrl}/metrics`);
  const text = await res.body.text();
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  assert.ok(m, `${name} is in /metrics`);
  return Number(m[1]);
}

before(async () => {
  p = await startProduct();
  port = new URL(p.url).port;
  const r = await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
  assert.equal(r.status, 200, r.text);
});
after(() => p.close());

describe('refused on the headers, before the body is read', () => {
  // Each declares 30 MB, sends 256 KiB of it, and must be answered at once, with the connection closed after.
  const big = { 'content-type': 'application/json', 'content-length': String(30_000_000) };
  const cases: [string, string, string, string, Record<string, string>, number, string][] = [
    ['raw /_db/query, no secret, an org nobody uses', 'POST', '/zzz/_db/query', 'nobody.localhost', {}, 401, 'unauthorized'],
    ['raw /_db/query, a wrong secret', 'POST', '/web/_db/query', 'acme.localhost', { authorization: wrong }, 401, 'unauthorized'],
    ['raw /_db/execute, another repo\'s secret', 'POST', '/other/_db/execute', 'acme.localhost', { authorization: 'Bearer x' }, 401, 'unauthorized'],
    ['raw /_db/v2/pipeline, a wrong secret', 'POST', '/web/_db/v2/pipeline', 'acme.localhost', { authorization: wrong }, 401, 'unauthorized'],
    ['raw /_db/v3/pipeline, no secret', 'POST', '/web/_db/v3/pipeline', 'acme.localhost', {}, 401, 'unauthorized'],
    ['raw /_db/{database}/v2/pipeline, a wrong secret', 'POST', '/web/_db/other/v2/pipeline', 'acme.localhost', { authorization: wrong }, 401, 'unauthorized'],
    ['raw route, a host that is no org\'s', 'POST', '/web/_db/query', 'example.com', { authorization: wrong }, 404, 'unknown_host'],
    ['raw route, a repo name that breaks SPEC 2', 'POST', '/_x/_db/query', 'acme.localhost', {}, 400, 'invalid_name'],
    ['raw route, an unknown operation', 'POST', '/web/_db/nope', 'acme.localhost', {}, 404, 'not_found'],
    ['Fastify /_db/query (a `%` escape in the path), a wrong secret', 'POST', '/w%65b/_db/query', 'acme.localhost', { authorization: wrong }, 401, 'unauthorized'],
    ['Fastify /_db/v2/pipeline with a query string, no secret', 'POST', '/web/_db/v2/pipeline?x=1', 'acme.localhost', {}, 401, 'unauthorized'],
    ['Fastify route, a host that is no org\'s', 'POST', '/w%65b/_db/query', 'example.com', {}, 404, 'unknown_host'],
    ['runtime credentials PUT, a wrong secret', 'PUT', '/web/_account/credentials/gh/token?user=u1', 'acme.localhost', { authorization: wrong }, 401, 'unauthorized'],
    ['runtime credentials PUT, ?user= and no secret', 'PUT', '/web/_account/credentials/gh/token?user=u1', 'acme.localhost', {}, 401, 'unauthorized'],
    ['credentials PUT without a session', 'PUT', '/web/_account/credentials/gh/token', 'acme.localhost', {}, 401, 'unauthenticated'],
  ];
  for (const [name, method, path, host, headers, status, code] of cases) {
    test(`${name}: ${status} ${code} at once, connection closed`, async () => {
      const c = partial(p.url, head(method, path, host, { ...big, ...headers }), 256 * 1024);
      const a = await c.answer;
      assert.ok(a, 'answered before the body was complete');
      assert.equal(a.status, status, a.body);
      assert.equal(a.json.error.code, code);
      if (status === 401 && code === 'unauthorized') assert.equal(a.headers['www-authenticate'], 'Bearer');
      assert.equal(a.headers.connection, 'close');
      assert.ok(a.headers['x-request-id']);
      await c.closed;
    });
  }

  test('a chunked body from a refused caller is read up to 16 KiB, then refused', async () => {
    const c = partial(p.url, head('POST', '/web/_db/query', 'acme.localhost', { 'transfer-encoding': 'chunked', authorization: wrong }), 0);
    c.socket.write(`${(64 * 1024).toString(16)}\r\n${' '.repeat(64 * 1024)}\r\n`);
    const a = await c.answer;
    assert.ok(a);
    assert.equal(a.status, 401);
    assert.equal(a.headers.connection, 'close');
    await c.closed;
  });

  test('a small body is still read first, so a bad database name in it is 400 before authentication (SPEC 2)', async () => {
    const r = await p.db('web', 'query', { database: 'Bad!', sql: 'SELECT 1' }, { secret: 'wrong' });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_name');
    const unauth = await p.db('web', 'query', { sql: 'SELECT 1' }, { secret: 'wrong' });
    assert.equal(unauth.status, 401);
  });

  test('20 connections declaring 30 MB each and sending all but a byte: answered at once, the server holds none of it', async () => {
    const body = Buffer.alloc(30_000_000 - 1, 0x20);
    const before = await metric('nodejs_external_memory_bytes');
    const conns = Array.from({ length: 20 }, (_, i) => partial(p.url, head('POST', '/zzz/_db/query', i % 2 ? 'nobody.localhost' : 'acme.localhost', {
      'content-type': 'application/json', 'content-length': String(30_000_000), ...(i % 2 ? {} : { authorization: wrong }),
    }), body, 10_000));
    const answers = await Promise.all(conns.map((c) => c.answer));
    for (const a of answers) assert.equal(a?.status, 401);
    const grown = (await metric('nodejs_external_memory_bytes')) - before;
    assert.ok(grown < 64 * MiB, `external memory grew by ${Math.round(grown / MiB)} MiB`);
    assert.equal(await metric('scopebase_request_body_bytes_in_flight'), 0);
    await Promise.all(conns.map((c) => c.closed));
  });

  test('a correct request is served after all that', async () => {
    const r = await p.db('web', 'query', { sql: 'SELECT count(*) AS n FROM t' });
    assert.equal(r.status, 200, r.text);
  });
});

describe('the budget of bodies in flight (MAX_BODY_BYTES_IN_FLIGHT)', () => {
  let q: Product;
  let qport: string;
  before(async () => {
    q = await startProduct({ DB_MAX_BODY_BYTES: String(MiB), MAX_BODY_BYTES_IN_FLIGHT: String(2 * MiB) });
    qport = new URL(q.url).port;
  });
  after(() => q.close());
  const qhead = (path: string, headers: Record<string, string>, org = 'acme') => `POST ${path} HTTP/1.1\r\nHost: ${org}.localhost:${qport}\r\nauthorization: Bearer ${q.secret(org, 'web')}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  const inFlight = async () => {
    const res = await request(`${q.running.adminUrl}/metrics`);
    return Number(/^scopebase_request_body_bytes_in_flight (\S+)$/m.exec(await res.body.text())![1]);
  };

  test('declared lengths are reserved on the headers; past the budget 503 with Retry-After at once; given back on close', async () => {
    // Two orgs' callers each declare 1 MiB and send a little: the budget (2 MiB) is taken (one repo may hold a quarter,
    // one org half).
    const holders = ['acme', 'beta'].map((org) => partial(q.url, qhead('/web/_db/query', { 'content-length': String(MiB) }, org), 1024));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await inFlight(), 2 * MiB);
    for (const path of ['/web/_db/execute', '/w%65b/_db/query', '/web/_db/v2/pipeline']) {
      const c = partial(q.url, qhead(path, { 'content-length': String(MiB / 2) }), 1024);
      const a = await c.answer;
      assert.ok(a, `${path}: answered before its body`);
      assert.equal(a.status, 503, a.body);
      assert.equal(a.json.error.code, 'unavailable');
      assert.equal(a.headers['retry-after'], '1');
      assert.equal(a.headers.connection, 'close');
      await c.closed;
    }
    // Chunked: counted as it arrives, refused once it would go past.
    const chunked = partial(q.url, qhead('/web/_db/query', { 'transfer-encoding': 'chunked' }), 0);
    chunked.socket.write(`${(256 * 1024).toString(16)}\r\n${' '.repeat(256 * 1024)}\r\n`);
    const ca = await chunked.answer;
    assert.equal(ca?.status, 503);
    await chunked.closed;
    assert.equal(await inFlight(), 2 * MiB);
    // The holders go away: their reservations are given back, and a request is served again.
    for (const h of holders) h.socket.destroy();
    await Promise.all(holders.map((h) => h.closed));
    for (let i = 0; i < 50 && (await inFlight()) !== 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await inFlight(), 0);
    const ok = await q.db('web', 'execute', { sql: 'SELECT 1' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(await inFlight(), 0, 'a served request gives its bytes back');
  });

  test('a refused caller takes nothing from the budget', async () => {
    const strangers = [0, 1, 2].map(() => partial(q.url, head('POST', '/web/_db/query', 'acme.localhost', { 'content-length': String(MiB) }, qport), 1024));
    for (const s of strangers) assert.equal((await s.answer)?.status, 401);
    assert.equal(await inFlight(), 0);
    const ok = await q.db('web', 'status', {});
    assert.equal(ok.status, 200, ok.text);
  });

  test("a stranger's sign-out or forward-auth check with a never-finished body takes nothing from the budget", async () => {
    // Both answer anyone. Read against the budget, 9 such connections held 256 MiB and every tenant's writes were 503.
    const verify = [0, 1, 2].map(() => partial(q.url, head('GET', '/web/_account/verify', 'acme.localhost', { 'content-length': String(MiB) }, qport), 10));
    for (const v of verify) {
      const a = await v.answer;
      assert.equal(a?.status, 401, 'answered at once, the body unread');
      assert.equal(a.headers.connection, 'close');
      await v.closed;
    }
    const logout = partial(q.url, head('POST', '/web/_account/logout', 'acme.localhost', { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(MiB / 2) }, qport), 10);
    const la = await logout.answer;
    assert.equal(la?.status, 413, la?.body);
    assert.equal(la.json.error.code, 'payload_too_large');
    assert.equal(la.headers.connection, 'close');
    // A small one (a sign-out form is a return_to) is waited for, but outside the budget.
    const form = 'return_to=%2Fweb%2Fbye';
    const slow = partial(q.url, head('POST', '/web/_account/logout', 'acme.localhost', { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(form.length) }, qport), Buffer.from(form.slice(0, 5)));
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await inFlight(), 0);
    assert.equal((await q.db('web', 'execute', { sql: 'SELECT 1' })).status, 200);
    slow.socket.write(form.slice(5));
    const sa = await slow.answer;
    assert.equal(sa?.status, 303, 'the sign-out form still works');
    assert.equal(sa.headers.location, '/web/bye');
    slow.socket.destroy();
  });

  test('MAX_BODY_BYTES_IN_FLIGHT below DB_MAX_BODY_BYTES stops the start, naming it', async () => {
    await assert.rejects(startProduct({ DB_MAX_BODY_BYTES: String(4 * MiB), MAX_BODY_BYTES_IN_FLIGHT: String(MiB) }), /MAX_BODY_BYTES_IN_FLIGHT/);
  });
});

describe('serve db on its own: the proxy token first, then the secret, before the body', () => {
  let d: Product;
  before(async () => {
    d = await startProduct({}, 'db');
  });
  after(() => d.close());
  const token = proxyToken(Buffer.from(ROOT_KEY, 'hex'));
  const dhead = (headers: Record<string, string>) => `POST /web/_db/query HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-length: 30000000\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;

  test('without the proxy token: 403 at once', async () => {
    const c = partial(d.url, dhead({ 'x-scopebase-org': 'acme', authorization: `Bearer ${d.secret('acme', 'web')}` }), 64 * 1024);
    const a = await c.answer;
    assert.equal(a?.status, 403);
    assert.equal(a.headers.connection, 'close');
  });

  test('with the token and a wrong secret: 401 at once', async () => {
    const c = partial(d.url, dhead({ 'x-scopebase-org': 'acme', 'x-scopebase-proxy-token': token, authorization: wrong }), 64 * 1024);
    const a = await c.answer;
    assert.equal(a?.status, 401);
    assert.equal(a.headers['www-authenticate'], 'Bearer');
  });
});

test('the reference mirror\'s /_db/query refuses a wrong secret on the headers too, before a large body', async () => {
  const m = await startProduct({ MIRROR_PORT: '0', MIRROR_SECRET: newSecret() });
  try {
    const url = m.running.mirrorUrl!;
    const c = partial(url, head('POST', '/web/_db/query', 'acme.localhost', { 'content-type': 'application/json', 'content-length': String(30_000_000), authorization: wrong }, new URL(url).port), 256 * 1024);
    const a = await c.answer;
    assert.ok(a, 'answered before the body was complete');
    assert.equal(a.status, 401, a.body);
    assert.equal(a.json.error.code, 'unauthorized');
    await c.closed;
  } finally {
    await m.close();
  }
});
