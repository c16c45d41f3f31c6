// SPEC 7.1 over real HTTP: the user's cookie routes, the runtime's Bearer routes, expiry, forms, secrecy (names,
// bodies and what a user may store: credentials-limits.test.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { credentialCalls, startCredentialsProduct, type CredProduct } from './helpers/credentials-product.ts';
import { signInUser, type SignedIn } from './helpers/session.ts';

let p: CredProduct;
let alice: SignedIn;
let bob: SignedIn;
const base = '/web/_account';
const { asUser, asRuntime } = credentialCalls(() => p);

function allFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const path = join(dir, f);
    return statSync(path).isDirectory() ? allFiles(path) : [path];
  });
}

before(async () => {
  p = await startCredentialsProduct();
  alice = await signInUser(p, 'acme', 'alice');
  bob = await signInUser(p, 'acme', 'bob');
});
after(() => p.close());

describe('the user with a session', () => {
  test('creates, lists (never values), replaces and deletes', async () => {
    let r = await asUser(alice, 'PUT', '/credentials/github/token', { value: 'ghp_abc' });
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(Object.keys(r.json).sort(), ['createdAt', 'expiresAt', 'fields', 'name', 'plugin', 'updatedAt']);
    assert.deepEqual(r.json.fields, []);
    assert.equal(r.json.expiresAt, null);
    r = await asUser(alice, 'PUT', '/credentials/smtp/login', { value: { user: 'a', password: 'pw' }, expiresAt: '2099-01-01T00:00:00+01:00' });
    assert.equal(r.status, 201);
    r = await asUser(alice, 'PUT', '/credentials/github/token', { value: 'ghp_def' });
    assert.equal(r.status, 200);
    assert.ok(r.json.updatedAt >= r.json.createdAt);
    r = await asUser(alice, 'GET', '/credentials');
    assert.equal(r.status, 200);
    assert.equal(r.headers['cache-control'], 'no-store');
    assert.ok(!r.text.includes('ghp_') && !r.text.includes('"pw"'));
    const list = r.json.credentials as { plugin: string; name: string; fields: string[]; expiresAt: string | null }[];
    assert.deepEqual(list.map((c) => `${c.plugin}/${c.name}`), ['github/token', 'smtp/login']);
    assert.deepEqual(list[1]!.fields, ['user', 'password']);
    assert.equal(list[1]!.expiresAt, '2098-12-31T23:00:00.000Z');
    // Bob sees none of Alice's.
    r = await asUser(bob, 'GET', '/credentials');
    assert.deepEqual(r.json.credentials, []);
    r = await asUser(alice, 'DELETE', '/credentials/smtp/login');
    assert.equal(r.status, 204);
    r = await asUser(alice, 'DELETE', '/credentials/smtp/login');
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'not_found');
  });

  test('cannot read a value with the cookie alone', async () => {
    await asUser(alice, 'PUT', '/credentials/github/token', { value: 'ghp_cookie' });
    let r = await asUser(alice, 'GET', '/credentials/github/token');
    assert.equal(r.status, 403);
    assert.equal(r.json.error.code, 'forbidden');
    assert.ok(!r.text.includes('ghp_'));
    // A ?user= with the cookie is the runtime form: it needs the secret.
    r = await asUser(alice, 'GET', `/credentials/github/token?user=${alice.userId}`);
    assert.equal(r.status, 401);
    assert.equal(r.json.error.code, 'unauthorized');
    assert.equal(r.headers['www-authenticate'], 'Bearer');
    r = await p.call(`${base}/credentials/github/token`);
    assert.equal(r.status, 401);
    assert.equal(r.headers['www-authenticate'], 'Bearer');
  });

  test('no session: 401 unauthenticated; a session of another org does not count', async () => {
    let r = await p.call(`${base}/credentials`);
    assert.equal(r.status, 401);
    assert.equal(r.json.error.code, 'unauthenticated');
    r = await p.call(`${base}/credentials/a/b`, { method: 'PUT', rawBody: '{"value":"x"}' });
    assert.equal(r.json.error.code, 'unauthenticated');
    const other = await signInUser(p, 'other', 'alice');
    r = await asUser(other, 'GET', '/credentials');
    assert.equal(r.status, 401);
    r = await p.call(`${base}/credentials`, { headers: { cookie: 'session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' } });
    assert.equal(r.status, 401);
  });

  test('cross-site writes are refused (Origin and Sec-Fetch-Site), same-site ones pass', async () => {
    const crossSite: Record<string, string>[] = [{ origin: 'https://evil.example' }, { 'sec-fetch-site': 'cross-site' }, { 'sec-fetch-site': 'same-site' }, { origin: 'null' }];
    for (const headers of crossSite) {
      for (const method of ['PUT', 'DELETE']) {
        const r = await asUser(alice, method, '/credentials/github/token', method === 'PUT' ? { value: 'evil' } : undefined, { headers });
        assert.equal(r.status, 403, `${method} ${JSON.stringify(headers)}`);
        assert.equal(r.json.error.code, 'forbidden');
      }
    }
    const port = new URL(p.url).port;
    // The same host on another scheme is another site (schemeful same-site): served over http, https:// is foreign.
    const otherScheme = await asUser(alice, 'PUT', '/credentials/github/token', { value: 'evil' }, { headers: { origin: `https://acme.localhost:${port}` } });
    assert.equal(otherScheme.status, 403, otherScheme.text);
    assert.match(otherScheme.json.error.message, /TRUSTED_PROXIES/, 'the likely cause is named');
    const r = await asUser(alice, 'PUT', '/credentials/github/token', { value: 'fine' }, { headers: { origin: `http://acme.localhost:${port}`, 'sec-fetch-site': 'same-origin' } });
    assert.equal(r.status, 200, r.text);
    const got = await asRuntime('GET', '/credentials/github/token', alice.userId);
    assert.equal(got.json.value, 'fine');
  });
});

describe('the runtime with the repo secret', () => {
  test('a deeply nested value is 400 with the nesting limit, for the runtime and the cookie alike (never a 500)', async () => {
    const deep = `{"value":${'{"a":'.repeat(5000)}1${'}'.repeat(5001)}`;
    const headers = { authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' };
    let r = await p.call(`/web/_account/credentials/p/deep?user=${alice.userId}`, { method: 'PUT', rawBody: deep, headers });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_request');
    assert.match(r.json.error.message, /nests deeper than 64 levels/);
    r = await asUser(alice, 'PUT', '/credentials/p/deep', undefined, { rawBody: deep, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400, r.text);
    const shallow = `{"value":${'{"a":'.repeat(60)}1${'}'.repeat(61)}`;
    r = await p.call(`/web/_account/credentials/p/ok?user=${alice.userId}`, { method: 'PUT', rawBody: shallow, headers });
    assert.equal(r.status, 201, r.text);
    const db = await p.call('/web/_db/execute', { method: 'POST', rawBody: `{"sql":"SELECT ?","params":[${'['.repeat(5000)}${']'.repeat(5000)}]}`, headers });
    assert.equal(db.status, 400, 'the database API too');
  });

  test('a deeply nested JSON value in the account page\'s form: 303 back to the page saying so, never a 500 (attack round 4)', async () => {
    // The form's JSON was parsed on its own, without the nesting limit: JSON.stringify overflowed the stack.
    const value = `{"a":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const r = await asUser(alice, 'POST', '/credentials/form', undefined, {
      rawBody: new URLSearchParams({ _method: 'put', plugin: 'p', name: 'deepform', type: 'json', value }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: `http://acme.localhost:${new URL(p.url).port}` },
    });
    assert.equal(r.status, 303, r.text.slice(0, 300));
    assert.match(String(r.headers.location), /credentials_error=invalid_request&problem=value_deep/);
    const page = await asUser(alice, 'GET', `/?${String(r.headers.location).split('?')[1]}`);
    assert.match(page.text, /nests too deeply/);
    const list = await asUser(alice, 'GET', '/credentials');
    assert.ok(!list.json.credentials.some((c: { name: string }) => c.name === 'deepform'));
  });

  test('reads, writes and deletes on the user\'s behalf', async () => {
    let r = await asRuntime('PUT', '/credentials/slack/bot', alice.userId, { value: { token: 'xoxb-1', team: 'T1' } });
    assert.equal(r.status, 201, r.text);
    r = await asRuntime('GET', '/credentials/slack/bot', alice.userId);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { plugin: 'slack', name: 'bot', value: { token: 'xoxb-1', team: 'T1' }, expiresAt: null });
    assert.equal(r.headers['cache-control'], 'no-store');
    r = await asRuntime('GET', '/credentials/slack/bot', bob.userId);
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'not_found');
    r = await asRuntime('DELETE', '/credentials/slack/bot', alice.userId);
    assert.equal(r.status, 204);
    r = await asRuntime('GET', '/credentials/slack/bot', alice.userId);
    assert.equal(r.status, 404);
  });

  test('a user id nobody signed in with is 404, and nothing is stored for it (it used to be 201: a credential no one could ever see)', async () => {
    const r = await asRuntime('PUT', '/credentials/slack/bot', `${alice.userId}x`, { value: 'typo' });
    assert.equal(r.status, 404, r.text);
    assert.equal(r.json.error.code, 'not_found');
    assert.match(r.json.error.message, /no user with this id/);
    assert.equal((await asRuntime('GET', '/credentials/slack/bot', `${alice.userId}x`)).status, 404, 'nothing stored');
    assert.equal((await asRuntime('PUT', '/credentials/slack/typo', alice.userId, { value: 'v' })).status, 201, 'a known user still works');
    assert.equal((await asRuntime('DELETE', '/credentials/slack/typo', alice.userId)).status, 204);
  });

  test('missing, wrong, other repo\'s and other org\'s secrets: 401 with WWW-Authenticate', async () => {
    await asRuntime('PUT', '/credentials/slack/bot', alice.userId, { value: 'v' });
    const cases: [string, Record<string, string>][] = [
      ['none', {}],
      ['wrong', { authorization: `Bearer ${randomBytes(32).toString('base64url')}` }],
      ['other repo', { authorization: `Bearer ${p.secret('acme', 'api')}` }],
      ['other org', { authorization: `Bearer ${p.secret('other', 'web')}` }],
      ['not bearer', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
      ['root key', { authorization: `Bearer ${'a'.repeat(64)}` }],
    ];
    for (const [what, headers] of cases) {
      for (const method of ['GET', 'PUT', 'DELETE']) {
        const r = await p.call(`${base}/credentials/slack/bot?user=${alice.userId}`, { method, headers: { ...headers, 'content-type': 'application/json' }, ...(method === 'PUT' ? { rawBody: '{"value":"x"}' } : {}) });
        assert.equal(r.status, 401, `${what} ${method}`);
        assert.equal(r.json.error.code, 'unauthorized');
        assert.equal(r.headers['www-authenticate'], 'Bearer');
      }
    }
    // The other org's secret on the other org's host opens the other org's (empty) store, not acme's.
    const r = await asRuntime('GET', '/credentials/slack/bot', alice.userId, undefined, { org: 'other' });
    assert.equal(r.status, 404);
    const still = await asRuntime('GET', '/credentials/slack/bot', alice.userId);
    assert.equal(still.json.value, 'v');
  });

  test('needs ?user=, once, printable', async () => {
    const headers = { authorization: `Bearer ${p.secret('acme', 'web')}` };
    let r = await p.call(`${base}/credentials/slack/bot`, { headers });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, 'invalid_request');
    r = await p.call(`${base}/credentials/slack/bot?user=a&user=b`, { headers });
    assert.equal(r.json.error.code, 'invalid_request');
    r = await p.call(`${base}/credentials/slack/bot?user=${encodeURIComponent('a\nb')}`, { headers });
    assert.equal(r.json.error.code, 'invalid_request');
  });
});

describe('expiry', () => {
  test('an expired credential reads as 404 but stays listed with its expiresAt until replaced or deleted', async () => {
    const soon = new Date(Date.now() + 1200).toISOString();
    let r = await asRuntime('PUT', '/credentials/oauth/access', alice.userId, { value: 'short-lived', expiresAt: soon });
    assert.equal(r.status, 201);
    r = await asRuntime('GET', '/credentials/oauth/access', alice.userId);
    assert.equal(r.json.expiresAt, soon);
    await new Promise((res) => setTimeout(res, 1500));
    r = await asRuntime('GET', '/credentials/oauth/access', alice.userId);
    assert.equal(r.status, 404);
    assert.equal(r.json.error.code, 'not_found');
    assert.match(r.json.error.message, /expired/);
    r = await asUser(alice, 'GET', '/credentials');
    assert.equal(r.json.credentials.find((c: { plugin: string }) => c.plugin === 'oauth').expiresAt, soon);
    r = await asRuntime('PUT', '/credentials/oauth/access', alice.userId, { value: 'fresh' });
    assert.equal(r.status, 200);
    r = await asRuntime('GET', '/credentials/oauth/access', alice.userId);
    assert.deepEqual([r.json.value, r.json.expiresAt], ['fresh', null]);
  });
});

describe('forms and the account page (no JavaScript)', () => {
  const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
  const formHeaders = (u: SignedIn, extra: Record<string, string> = {}) => ({ cookie: u.cookie, 'content-type': 'application/x-www-form-urlencoded', ...extra });

  test('add, replace and delete by form post; 303 back to the account page', async () => {
    const dave = await signInUser(p, 'acme', 'dave');
    let r = await p.call(`${base}/credentials/form`, { method: 'POST', headers: formHeaders(dave), rawBody: form({ plugin: 'stripe', name: 'key', value: '{"id":"k","secret":"sk_form"}', type: 'json', expiresAt: '2099-06-01T10:00' }) });
    assert.equal(r.status, 303, r.text);
    assert.equal(r.headers.location, '/web/_account/?credentials=created');
    r = await p.call(`${base}/credentials/stripe/key`, { method: 'POST', headers: formHeaders(dave), rawBody: form({ _method: 'put', value: 'sk_plain', type: 'text' }) });
    assert.equal(r.headers.location, '/web/_account/?credentials=replaced');
    r = await asRuntime('GET', '/credentials/stripe/key', dave.userId);
    assert.deepEqual([r.json.value, r.json.expiresAt], ['sk_plain', null]);
    r = await p.call(`${base}/credentials/form`, { method: 'POST', headers: formHeaders(dave), rawBody: form({ plugin: 'Bad/Name', name: 'x', value: 'v' }) });
    assert.equal(r.headers.location, '/web/_account/?credentials_error=invalid_name');
    r = await p.call(`${base}/credentials/form`, { method: 'POST', headers: formHeaders(dave), rawBody: form({ plugin: 'a', name: 'b', value: '[1]', type: 'json' }) });
    assert.equal(r.headers.location, '/web/_account/?credentials_error=invalid_request&problem=value_object&plugin=a&name=b&type=json');
    // The page words what was wrong (fixed text, nothing echoed) and fills in the names again, never the value.
    const cases: [Record<string, string>, string, RegExp][] = [
      [{ plugin: 'gh', name: 'tok', value: '{not json', type: 'json' }, 'value_json', /The value is not valid JSON/],
      [{ plugin: 'gh', name: 'tok', value: '"x"', type: 'json', expiresAt: '2001-01-01T00:00' }, 'value_object', /must be an object/],
      [{ plugin: 'gh', name: 'tok', value: '{"a":1}', type: 'json', expiresAt: '2001-01-01T00:00' }, 'expiry', /The expiry must be a real date and time in the future/],
    ];
    for (const [fields, problem, words] of cases) {
      const posted = await p.call(`${base}/credentials/form`, { method: 'POST', headers: formHeaders(dave), rawBody: form(fields) });
      assert.match(String(posted.headers.location), new RegExp(`problem=${problem}&plugin=gh&name=tok&type=json$`));
      const page = await p.call(String(posted.headers.location), { headers: { cookie: dave.cookie, accept: 'text/html' } });
      assert.match(page.text, words);
      assert.match(page.text, /id="new-plugin"[^>]* value="gh"/);
      assert.match(page.text, /id="new-type"[^>]*><option value="text">[^<]*<\/option><option value="json" selected>/, 'the kind chosen stays chosen');
      assert.doesNotMatch(page.text, /not json/, 'the value is never put back');
    }
    const crafted = await p.call('/web/_account/?credentials_error=invalid_request&problem=x&plugin=%3Cb%3E', { headers: { cookie: dave.cookie, accept: 'text/html' } });
    assert.doesNotMatch(crafted.text, /value="<b>|value="&lt;b&gt;"/, 'only a valid name is filled in');
    r = await p.call(`${base}/credentials/form`, { method: 'POST', headers: formHeaders(dave, { origin: 'https://evil.example' }), rawBody: form({ plugin: 'stripe', name: 'key', _method: 'delete' }) });
    assert.equal(r.status, 403);
    r = await p.call(`${base}/credentials/form`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, rawBody: form({ plugin: 'stripe', name: 'key', _method: 'delete' }) });
    assert.equal(r.status, 401);
    r = await p.call(`${base}/credentials/stripe/key`, { method: 'POST', headers: formHeaders(dave), rawBody: form({ _method: 'delete' }) });
    assert.equal(r.headers.location, '/web/_account/?credentials=deleted');
    r = await asRuntime('GET', '/credentials/stripe/key', dave.userId);
    assert.equal(r.status, 404);
  });

  test('the account page lists credentials and the audit trail without values', async () => {
    const erin = await signInUser(p, 'acme', 'erin');
    await asUser(erin, 'PUT', '/credentials/jira/api', { value: { user: 'e', apiKey: 'jira-secret-1' } });
    await asRuntime('GET', '/credentials/jira/api', erin.userId);
    await asRuntime('PUT', '/credentials/jira/api', erin.userId, { value: { user: 'e', apiKey: 'jira-secret-2' } });
    await asUser(erin, 'PUT', '/credentials/tmp/x', { value: '<script>alert(1)</script>' });
    await asUser(erin, 'DELETE', '/credentials/tmp/x');
    const r = await p.call(`${base}/?credentials=created`, { headers: { cookie: erin.cookie } });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.text.includes('Plugin credentials'));
    assert.ok(r.text.includes('data-plugin="jira" data-name="api"'));
    assert.ok(r.text.includes('<code>apiKey</code>'));
    assert.ok(!r.text.includes('jira-secret') && !r.text.includes('<script>'));
    assert.ok(r.text.includes('Credential stored.'));
    for (const action of ['create', 'read', 'replace', 'delete']) assert.ok(r.text.includes(`<td>${action}</td>`), action);
    assert.ok(r.text.includes('the runtime (repo secret)'));
    assert.ok(r.text.includes('action="/web/_account/credentials/form"'));
  });
});

describe('secrecy', () => {
  test('a stored value appears in no file under DATA_DIR and in no log line', async () => {
    const marker = `MARKER-${randomBytes(12).toString('hex')}`;
    const fred = await signInUser(p, 'acme', 'fred');
    await asUser(fred, 'PUT', '/credentials/marker/one', { value: marker });
    await asUser(fred, 'PUT', '/credentials/marker/two', { value: { field: marker } });
    await asRuntime('PUT', '/credentials/marker/three', fred.userId, { value: `${marker}-runtime` });
    const r = await asRuntime('GET', '/credentials/marker/one', fred.userId);
    assert.equal(r.json.value, marker);
    await asUser(fred, 'PUT', '/credentials/marker/one', { value: `x${marker}`.repeat(70_000 / marker.length) }); // refused, too large
    await asUser(fred, 'PUT', '/credentials/marker/one', undefined, { rawBody: `{"value": "${marker}`, headers: { 'content-type': 'application/json' } });
    const files = allFiles(p.dataDir);
    assert.ok(files.some((f) => f.endsWith('credentials.sqlite')));
    const needle = Buffer.from(marker);
    for (const f of files) assert.ok(!readFileSync(f).includes(needle), `${f} holds the plaintext`);
    assert.ok(p.logs().length > 0, 'logs were captured');
    assert.ok(!p.logs().includes(marker), 'the log holds the plaintext');
    assert.ok(p.logs().includes('credential stored'));
    for (const u of [alice, bob, fred]) assert.ok(!p.logs().includes(u.cookie.split('=')[1]!), 'a session token was logged');
    assert.ok(!p.logs().includes(p.secret('acme', 'web')), 'the repo secret was logged');
  });
});
