// SPEC 7.1 limits over real HTTP: plugin and credential names, request bodies, value sizes, and how many credentials
// a signed-in user may store in a repo and in an org (attack round 4), and the audit trail's bound.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { DatabaseSync } from 'node:sqlite';
import { AUDIT_MAX_PER_USER, AUDIT_SCHEMA, writeAudit } from '../src/account/credentials/audit.ts';
import { credentialCalls, startCredentialsProduct, type CredProduct } from './helpers/credentials-product.ts';
import { signInUser, type SignedIn } from './helpers/session.ts';

let p: CredProduct;
let alice: SignedIn;
const base = '/web/_account';
const { asUser, asRuntime } = credentialCalls(() => p);

/** One request with its path exactly as given. */
function raw(method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string }> {
  const port = new URL(p.url).port;
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path, headers: { host: `acme.localhost:${port}`, ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

before(async () => {
  p = await startCredentialsProduct();
  alice = await signInUser(p, 'acme', 'alice');
});
after(async () => {
  try {
    // The secrecy test of credentials-api.test.ts asks this of its product's log; the requests here are asked it too.
    assert.ok(!p.logs().includes(alice.cookie.split('=')[1]!), 'a session token was logged');
    assert.ok(!p.logs().includes(p.secret('acme', 'web')), 'the repo secret was logged');
  } finally {
    await p.close();
  }
});

describe('names and bodies', () => {
  const bad = [
    'a%2Fb', '.hidden', 'UPPER', 'x'.repeat(65), 'x'.repeat(10_000), encodeURIComponent('ｇｉｔｈｕｂ'),
    encodeURIComponent('git\u202Ehub'), encodeURIComponent('github\u200B'), encodeURIComponent('gıthub'), 'a%00b', 'a%20b', '-a', '_a',
  ];
  test('plugin and name break the pattern: 400 invalid_name before authentication', async () => {
    for (const name of bad) {
      for (const path of [`/credentials/${name}/token`, `/credentials/github/${name}`]) {
        for (const method of ['GET', 'PUT', 'DELETE']) {
          const r = await p.call(`${base}${path}`, { method, rawBody: method === 'PUT' ? '{"value":"x"}' : undefined });
          assert.equal(r.status, 400, `${method} ${path.slice(0, 80)} -> ${r.status} ${r.text.slice(0, 200)}`);
          assert.equal(r.json.error.code, 'invalid_name');
          assert.ok(r.text.length < 1000);
        }
      }
    }
  });

  test('slashes and dot segments in plugin or name: 400 invalid_name', async () => {
    // Sent byte for byte (a URL object would resolve the dot segments on the client).
    for (const path of ['/credentials/a/b/c', '/credentials/a', '/credentials/a/b/', '/credentials/a/../b', '/credentials/../../x/y', '/credentials/../..', '/credentials/a/..', '/credentials/./b', '/credentials/%2E%2E/b', '/credentials/a/.%2e', '/credentials/a%2F..%2Fb/c']) {
      for (const method of ['GET', 'PUT', 'DELETE', 'POST']) {
        const r = await raw(method, `${base}${path}`, { cookie: alice.cookie, 'content-type': 'application/json' }, method === 'PUT' || method === 'POST' ? '{"value":"x"}' : undefined);
        assert.equal(r.status, 400, `${method} ${path} -> ${r.text}`);
        assert.equal(JSON.parse(r.text).error.code, 'invalid_name', `${method} ${path} -> ${r.text}`);
      }
    }
  });

  test('bad bodies: 400 invalid_request, without echoing the body', async () => {
    const secretish = `not-json-${randomBytes(8).toString('hex')}`;
    const bodies = [secretish, '', '[]', '"x"', '{"value": null}', '{"value": [1]}', '{"value": 5}', '{}', '{"value":"x","expires_at":"2099-01-01T00:00:00Z"}',
      '{"value":"x","expiresAt":"tomorrow"}', '{"value":"x","expiresAt":"2000-01-01T00:00:00Z"}', `{"value": "${secretish}`];
    for (const rawBody of bodies) {
      const r = await asUser(alice, 'PUT', '/credentials/github/token', undefined, { rawBody, headers: { 'content-type': 'application/json' } });
      assert.equal(r.status, 400, `${rawBody} -> ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.ok(!r.text.includes(secretish), r.text);
    }
  });

  test('a value over 64 KiB: 413 payload_too_large; exactly at the limit is fine', async () => {
    let r = await asUser(alice, 'PUT', '/credentials/big/value', { value: 'x'.repeat(64 * 1024 - 2) });
    assert.equal(r.status, 201, r.text);
    r = await asUser(alice, 'PUT', '/credentials/big/value', { value: 'x'.repeat(64 * 1024 - 1) });
    assert.equal(r.status, 413);
    assert.equal(r.json.error.code, 'payload_too_large');
    r = await asRuntime('PUT', '/credentials/big/value', alice.userId, { value: { k: 'é'.repeat(40 * 1024) } });
    assert.equal(r.status, 413);
    await asUser(alice, 'DELETE', '/credentials/big/value');
  });

  test('at most 100 credentials per user and repo: 507 quota_exceeded; replacing still works', async () => {
    const carol = await signInUser(p, 'acme', 'carol');
    for (let i = 0; i < 100; i++) {
      const r = await asUser(carol, 'PUT', `/credentials/p/n${i}`, { value: 'v' });
      assert.equal(r.status, 201);
    }
    let r = await asUser(carol, 'PUT', '/credentials/p/n100', { value: 'v' });
    assert.equal(r.status, 507);
    assert.equal(r.json.error.code, 'quota_exceeded');
    r = await asUser(carol, 'PUT', '/credentials/p/n5', { value: 'w' });
    assert.equal(r.status, 200);
    // Another repo has its own count.
    r = await p.call('/api/_account/credentials/p/n100', { method: 'PUT', headers: { cookie: carol.cookie }, rawBody: '{"value":"v"}' });
    assert.equal(r.status, 201);
  });
});

describe('storage a signed-in user can take (attack round 4)', () => {
  test('at most 1,000 credentials per user in an org\'s repos together: a session cannot fill the disk under ever new repo names, nor another org use up this one\'s', async () => {
    // Repos are any name: before, 100 per repo under repo after repo grew the store without bound (64 KiB each).
    const mallory = await signInUser(p, 'acme', 'mallory');
    const value = { value: 'x'.repeat(1000) };
    const put = (repo: string, name: string) => p.call(`/${repo}/_account/credentials/p/${name}`, { method: 'PUT', headers: { cookie: mallory.cookie, 'content-type': 'application/json' }, rawBody: JSON.stringify(value) });
    for (let r = 0; r < 10; r++) {
      for (let i = 0; i < 100; i += 20) {
        const answers = await Promise.all(Array.from({ length: 20 }, (_, k) => put(`fill${r}`, `n${i + k}`)));
        for (const a of answers) assert.equal(a.status, 201, a.text);
      }
    }
    let r = await put('fill10', 'n0');
    assert.equal(r.status, 507, r.text);
    assert.equal(r.json.error.code, 'quota_exceeded');
    assert.match(r.json.error.message, /1000 credentials in all repos of an org/);
    // The repo's runtime acting for the user is held to the same total.
    r = await asRuntime('PUT', '/credentials/p/extra', mallory.userId, value, { repo: 'fill11' });
    assert.equal(r.status, 507, r.text);
    // Another org's runtime writing on the user's behalf counts in that org, not here (and is not held by this one).
    r = await asRuntime('PUT', '/credentials/p/elsewhere', mallory.userId, value, { org: 'other', repo: 'fill0' });
    assert.equal(r.status, 201, r.text);
    // Replacing still works, and a deletion makes room.
    assert.equal((await put('fill0', 'n0')).status, 200);
    assert.equal((await p.call('/fill0/_account/credentials/p/n1', { method: 'DELETE', headers: { cookie: mallory.cookie } })).status, 204);
    assert.equal((await put('fill10', 'n0')).status, 201);
  });

  test('the audit trail keeps at most 10,000 rows per user, the most recent', () => {
    const db = new DatabaseSync(':memory:');
    db.exec(AUDIT_SCHEMA);
    const row = (user: string, i: number) => writeAudit(db, { org: 'acme', repo: `r${i}`, user, plugin: 'p', name: 'n', action: 'delete', actor: user, requestId: null });
    for (let i = 0; i < AUDIT_MAX_PER_USER + 500; i++) row('usr_a', i);
    for (let i = 0; i < 10; i++) row('usr_b', i);
    // The same user in another org: its rows are not pushed out by this org's.
    writeAudit(db, { org: 'other', repo: 'r', user: 'usr_a', plugin: 'p', name: 'n', action: 'delete', actor: 'usr_a', requestId: null });
    for (let i = 0; i < 100; i++) row('usr_a', AUDIT_MAX_PER_USER + 500 + i);
    assert.equal((db.prepare("SELECT count(*) AS n FROM credential_audit WHERE user_id = 'usr_a' AND org = 'other'").get() as { n: number }).n, 1);
    const count = (user: string) => (db.prepare("SELECT count(*) AS n FROM credential_audit WHERE user_id = ? AND org = 'acme'").get(user) as { n: number }).n;
    assert.ok(count('usr_a') <= AUDIT_MAX_PER_USER + 32, `usr_a has ${count('usr_a')} rows`);
    assert.equal(count('usr_b'), 10);
    // The newest stay.
    assert.ok(db.prepare("SELECT 1 FROM credential_audit WHERE user_id = 'usr_a' AND repo = ?").get(`r${AUDIT_MAX_PER_USER + 499}`));
    db.close();
  });
});
