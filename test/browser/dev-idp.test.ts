// The development identity provider's pages in headless Chromium load nothing from a third party: its sign-in form,
// oidc-provider's own error page and its logout pages are ours, and no request leaves loopback.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { type Browser, type BrowserContext } from 'playwright-core';
import { launchChromium } from '../helpers/browser.ts';
import { startAccounts, type AccountsProduct } from '../helpers/accounts.ts';

let p: AccountsProduct;
let browser: Browser;

before(async () => {
  p = await startAccounts();
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
  await p?.close();
});

const LOOPBACK = /^(127\.0\.0\.1|localhost|[a-z0-9-]+\.localhost)$/;

/** A context that records every request its pages make, and aborts any that would leave loopback (none may). */
async function watched(): Promise<{ context: BrowserContext; away: string[] }> {
  const context = await browser.newContext();
  const away: string[] = [];
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if ((url.protocol === 'http:' || url.protocol === 'https:') && LOOPBACK.test(url.hostname)) return route.continue();
    away.push(url.href);
    return route.abort();
  });
  return { context, away };
}

test('sign-in, an error of the provider, and its sign-out: every request stays on loopback', async () => {
  const { context, away } = await watched();
  const page = await context.newPage();
  const base = `http://acme.localhost:${p.port}`;
  await page.goto(`${base}/web/_account/login?return_to=${encodeURIComponent('/web/_account/')}`);
  const idp = new URL(page.url()).origin;
  assert.match(idp, /^http:\/\/127\.0\.0\.1:\d+$/, 'on the development provider\'s sign-in form');
  await page.getByLabel('Email').fill('fonts@example.com');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/web/_account/`);

  // oidc-provider's own error page (its default imports fonts.googleapis.com): an unknown client, a foreign redirect.
  const error = await page.goto(`${idp}/auth?client_id=nope&redirect_uri=http://evil.com/&response_type=code&scope=openid&state=%3Cimg%20src%3Dhttp%3A%2F%2Fevil.com%2Fs%3E`);
  assert.equal(error!.status(), 400);
  assert.deepEqual(away, [], 'the error page loaded nothing from elsewhere');
  assert.match(String(error!.headers()['content-security-policy']), /default-src 'none'/);
  await assert.doesNotReject(page.getByRole('heading', { name: 'Sign-in failed' }).waitFor());
  assert.match(await page.getByRole('alert').innerText(), /client is invalid\s+Error code: invalid_client/);
  const html = await page.content();
  assert.doesNotMatch(html, /googleapis|<img|<script/, 'nothing of the request is echoed as markup');
  const mismatch = await page.goto(`${idp}/auth?client_id=scopebase-dev&redirect_uri=http://evil.com/&response_type=code&scope=openid`);
  assert.equal(mismatch!.status(), 400);
  assert.match(await page.getByRole('alert').innerText(), /redirect_uri did not match any of the client's registered redirect_uris/);

  // Its RP-initiated logout: the confirmation (the provider's session from the sign-in above) and the success page.
  await page.goto(`${idp}/session/end`);
  await assert.doesNotReject(page.getByRole('heading', { name: 'Sign out of the development provider?' }).waitFor());
  await page.getByRole('button', { name: 'Yes, sign me out' }).click();
  await assert.doesNotReject(page.getByRole('heading', { name: 'Signed out' }).waitFor());
  assert.match(await page.locator('main').innerText(), /signed out of the development identity provider/);

  assert.deepEqual(away, [], 'no request left loopback');
  await context.close();
});
