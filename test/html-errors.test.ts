// Issue 14: a person's browser never sees raw JSON. Errors of the proxy and the account service come as an HTML
// page to a request that asks for HTML; API clients (JSON, */*, no Accept) keep SPEC 3's JSON shape.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

test('a browser gets the error as a page: status, message, code, request id, and the way to the account page', async () => {
  const landing = await p.call('/web/', { headers: { accept: BROWSER } });
  assert.equal(landing.status, 200, 'the root of a repo without an app is its landing page (test/browser/account.test.ts)');
  assert.match(landing.text, /<h1>acme\/web<\/h1>/);
  const r = await p.call('/web/some/page', { headers: { accept: BROWSER } });
  assert.equal(r.status, 404);
  assert.match(String(r.headers['content-type']), /^text\/html/);
  assert.match(String(r.headers['content-security-policy']), /default-src 'none'/);
  assert.match(r.text, /<h1>404 — not found<\/h1>/);
  assert.match(r.text, /no app is configured for acme\/web/);
  assert.match(r.text, /<a class="button" href="\/web\/_account\/">Your account<\/a>/);
  assert.match(r.text, new RegExp(`request <code>${r.headers['x-request-id']}</code>`));
  const account = await p.call('/web/_account/nowhere', { headers: { accept: BROWSER } });
  assert.equal(account.status, 404);
  assert.match(account.text, /no (route|account endpoint).* \/web\/_account\/nowhere/);
});

test('the places people land first say where to go: the banner\'s address, an org host\'s root', async () => {
  const port = new URL(p.url).port;
  const bare = await fetch(`http://127.0.0.1:${port}/`, { headers: { accept: BROWSER } });
  assert.equal(bare.status, 404);
  const page = await bare.text();
  assert.match(page, new RegExp(`each organization has its own host and each repo its path there, e\\.g\\. <a href="http://acme\\.localhost:${port}/web/_account/">`), 'a link, not text to copy');
  const other = await fetch(`http://127.0.0.1:${port}/web/`, { headers: { accept: BROWSER } });
  assert.doesNotMatch(await other.text(), /Your account/, 'no account button on a host that has no account page');
  const badOrg = await p.call('/web/', { host: `ac_me.localhost:${port}`, headers: { accept: BROWSER } });
  assert.equal(badOrg.status, 400);
  assert.doesNotMatch(badOrg.text, /Your account/, 'nor on a host whose org name is refused: its account page is the same refusal');
  // A refused name is explained in words on a page (it showed the pattern, ^[a-z0-9]…$); API clients keep the pattern.
  assert.match(badOrg.text, /org name &quot;ac_me&quot; is not allowed: names are lowercase letters, digits and &quot;-&quot;, starting and ending with a letter or digit, up to 63 characters/);
  const badRepo = await p.call('/Web!/', { headers: { accept: BROWSER } });
  assert.equal(badRepo.status, 400);
  assert.match(badRepo.text, /repo name &quot;Web!&quot; is not allowed: names are lowercase letters, digits, &quot;\.&quot;, &quot;_&quot; and &quot;-&quot;, starting with a letter or digit, up to 100 characters/);
  for (const page of [badOrg.text, badRepo.text]) assert.doesNotMatch(page, /\^\[a-z0-9\]/);
  assert.match((await p.call('/Web!/')).json.error.message, /must match \^\[a-z0-9\]/);
  const root = await p.call('/', { headers: { accept: BROWSER } });
  assert.equal(root.status, 404);
  assert.match(root.text, /this is the host of the organization acme: each repository is at \/\{repo\}\/, e\.g\. \/web\//);
  assert.doesNotMatch(root.text, /\^\[a-z0-9\]/, 'no name pattern shown to a person');
});

test('API clients keep the JSON shape: application/json, */*, or no Accept at all', async () => {
  for (const accept of ['application/json', '*/*', undefined]) {
    const r = await p.call('/web/', { headers: accept ? { accept } : {} });
    assert.equal(r.status, 404, String(accept));
    assert.match(String(r.headers['content-type']), /^application\/json/);
    assert.equal(r.json.error.code, 'not_found');
  }
  const db = await p.db('web', 'query', { sql: 'SELECT 1' }, { headers: { accept: BROWSER }, secret: 'wrong' });
  assert.equal(db.status, 401);
  assert.equal(db.json.error.code, 'unauthorized', 'the database API answers JSON on its hot path whatever the Accept');
  const slow = await p.call('/web/_db/query?x=1', { method: 'POST', rawBody: '{}', headers: { accept: BROWSER } });
  assert.match(String(slow.headers['content-type']), /^application\/json/, 'and on the Fastify route too');
});

test('what the request put in the message is escaped', async () => {
  // The refusal quotes the name it was given; nothing of it becomes markup.
  const r = await p.call('/x%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E%26%22/', { headers: { accept: BROWSER } });
  assert.equal(r.status, 400);
  assert.match(String(r.headers['content-type']), /^text\/html/);
  assert.doesNotMatch(r.text, /<img src=x/);
  // The segment is decoded as on /_db and /_account (SPEC 2), so the markup in it is real: escaped, not run.
  assert.match(r.text, /repo name &quot;x&lt;img src=x onerror=alert\(1\)&gt;&amp;\\&quot;&quot; is not allowed: names are/);
});

test('an address in a path echoed by an error page stays text: no crafted link to elsewhere on the org\'s host', async () => {
  const r = await p.call('/web/_account/https://evil.example/phish', { headers: { accept: BROWSER } });
  assert.doesNotMatch(r.text, /<a href="https:\/\/evil/);
});

test('a person who types the sign-out address is told where the button is (sign-out is a POST)', async () => {
  const r = await p.call('/web/_account/logout', { headers: { accept: BROWSER } });
  assert.equal(r.status, 404);
  assert.match(r.text, /signing out is POST \/web\/_account\/logout: use the Sign out button on your account page/);
});
