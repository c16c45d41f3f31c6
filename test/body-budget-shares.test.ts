// One repo, or one client address, may hold a quarter of the bodies in flight (MAX_BODY_BYTES_IN_FLIGHT), and one
// org, all its repos together, half: a tenant that holds its bodies open, trickling, no longer takes every other
// org's requests down with 503. docs/security.md, "Request bodies". Raw sockets on loopback against the real product.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { partial, type Answer } from './helpers/partial-body.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { signInUser } from './helpers/session.ts';

const MiB = 1024 * 1024;
let p: Product;
let port: string;

before(async () => {
  // A 4 MiB budget: a repo's share is 1 MiB, one body at DB_MAX_BODY_BYTES.
  p = await startProduct({ DB_MAX_BODY_BYTES: String(MiB), MAX_BODY_BYTES_IN_FLIGHT: String(4 * MiB) });
  port = new URL(p.url).port;
});
after(() => p.close());

const head = (org: string, path: string, headers: Record<string, string>) =>
  `POST ${path} HTTP/1.1\r\nHost: ${org}.localhost:${port}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;

async function metrics(): Promise<string> {
  return (await request(`${p.running.adminUrl}/metrics`)).body.text();
}

async function inFlight(): Promise<number> {
  return Number(/^scopebase_request_body_bytes_in_flight (\S+)$/m.exec(await metrics())![1]);
}

/** Keeps a held body trickling (1 KiB every 200 ms: over the slowest rate a body may keep, so it is never cut). */
function trickle(held: ReturnType<typeof partial>): void {
  const timer = setInterval(() => held.socket.write(' '.repeat(1024)), 200);
  held.socket.once('close', () => clearInterval(timer));
}

function assertShareRefusal(a: Answer | null, who: string, share = '1048576 bytes, a quarter'): void {
  assert.ok(a, 'answered at once, before its body');
  assert.equal(a.status, 503, a.body);
  assert.equal(a.json.error.code, 'unavailable');
  assert.match(a.json.error.message, new RegExp(`this ${who} holds its share of the request bodies in flight \\(${share} of MAX_BODY_BYTES_IN_FLIGHT\\)`));
  assert.equal(a.json.error.details.committed, false);
  assert.equal(a.headers['retry-after'], '1');
  assert.equal(a.headers.connection, 'close');
}

test("a repo holding its bodies open slowly gets its share and no more: another org's execute answers 200", async () => {
  const secret = p.secret('evil', 'web');
  const body = { authorization: `Bearer ${secret}`, 'content-type': 'application/json', 'content-length': String(MiB) };
  const holders = Array.from({ length: 8 }, () => partial(p.url, head('evil', '/web/_db/execute', body), Buffer.from('{"sql":"')));
  const answers = await Promise.all(holders.map((h) => Promise.race([h.answer, new Promise<null>((r) => setTimeout(() => r(null), 1000))])));
  const held = holders.filter((_, i) => answers[i] === null);
  assert.equal(held.length, 1, 'one body at the share is held; the other seven are refused at once');
  for (const a of answers.filter((x) => x !== null)) assertShareRefusal(a, 'repo');
  held.forEach(trickle);
  // The same repo through Fastify's route (a `%` escape in the path) counts in the same share.
  assertShareRefusal(await partial(p.url, head('evil', '/w%65b/_db/execute', body), 10).answer, 'repo');
  assert.equal(await inFlight(), MiB);

  const other = await p.db('app', 'execute', { sql: 'CREATE TABLE IF NOT EXISTS t(v)' }, { org: 'good' });
  assert.equal(other.status, 200, other.text);
  assert.match(await metrics(), /^scopebase_request_body_budget_refusals_total\{limit="repo"\} 8$/m);
  for (const h of held) h.socket.destroy();
  await Promise.all(held.map((h) => h.closed));
  for (let i = 0; i < 50 && (await inFlight()) !== 0; i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(await inFlight(), 0, 'given back when the connection closes');
});

test("a caller without the repo's secret counts in its address's share, never in the repo's", async () => {
  // A signed-in user (any account the sign-in provider knows) is not the repo's secret holder: its credential writes
  // count against its client address, however many it holds open.
  const { cookie } = await signInUser(p, 'acme', 'mallory');
  const put = (name: string) => partial(p.url, head('acme', `/web/_account/credentials/gh/${name}`, {
    cookie, 'content-type': 'application/json', 'content-length': String(MiB), 'sec-fetch-site': 'same-origin',
  }).replace('POST', 'PUT'), Buffer.from('{"value":"'));
  const first = put('a');
  assert.equal(await Promise.race([first.answer, new Promise<null>((r) => setTimeout(() => r(null), 500))]), null, 'the first body is held');
  assertShareRefusal(await put('b').answer, 'client address');
  // The repo's secret holder, from the same address, still has its whole share: a body of 1 MiB goes through.
  const sql = `SELECT '${'x'.repeat(MiB - 100)}' AS big`;
  const full = await p.db('web', 'execute', { sql }, { org: 'acme' });
  assert.equal(full.status, 200, full.text.slice(0, 300));
  assert.equal(await inFlight(), MiB);
  first.socket.destroy();
  await first.closed;
});

test("an org's repos together hold half the budget at most: four repos trickling bodies leave room for another org's upload", async () => {
  const holders: { h: ReturnType<typeof partial>; answer: Answer | null | undefined }[] = [];
  for (let i = 0; i < 250 && (await inFlight()) !== 0; i++) await new Promise((r) => setTimeout(r, 20)); // the earlier tests' bodies are given back
  try {
    for (const repo of ['r1', 'r2', 'r3', 'r4']) {
      const before = await inFlight();
      const h = partial(p.url, head('many', `/${repo}/_db/execute`, {
        authorization: `Bearer ${p.secret('many', repo)}`, 'content-type': 'application/json', 'content-length': String(MiB),
      }), Buffer.from('{"sql":"'));
      const held: (typeof holders)[number] = { h, answer: undefined };
      void h.answer.then((a) => (held.answer = a));
      holders.push(held);
      trickle(h);
      // Until the server has decided on it: refused (answered), or held (its Content-Length reserved).
      for (let i = 0; i < 250 && held.answer === undefined && (await inFlight()) === before; i++) await new Promise((r) => setTimeout(r, 20));
    }
    // Another org's upload of a whole share gets in (before: the four repos held all 4 MiB, and it was 503).
    const full = await p.db('web', 'execute', { sql: `SELECT '${'x'.repeat(MiB - 100)}' AS big` }, { org: 'good' });
    assert.equal(full.status, 200, full.text.slice(0, 300));
    // Two repos are held, each within its own quarter, the org within its half; the next two are refused.
    assert.deepEqual(holders.map((x) => x.answer === undefined), [true, true, false, false]);
    for (const x of holders.slice(2)) assertShareRefusal(x.answer!, 'org', '2097152 bytes, half');
    assert.match(await metrics(), /^scopebase_request_body_budget_refusals_total\{limit="org"\} 2$/m);
  } finally {
    for (const x of holders) x.h.socket.destroy();
    await Promise.all(holders.map((x) => x.h.closed));
  }
});
