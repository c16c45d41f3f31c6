// End to end in headless Chromium: sign in through the proxy with the development provider, see the account page, sign out.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';
import { startAccounts, type AccountsProduct } from '../helpers/accounts.ts';

let p: AccountsProduct;
let browser: Browser;

before(async () => {
  p = await startAccounts();
  browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'] });
});
after(async () => {
  await browser?.close();
  await p?.close();
});

test('sign in with the development provider, see the account page, sign out', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const base = `http://acme.localhost:${p.port}`;
  await page.goto(`${base}/web/_account/login?return_to=${encodeURIComponent('/web/_account/')}`);
  await page.getByLabel('Email').fill('browser@example.com');
  await page.getByLabel('Name').fill('Browser Tester');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/web/_account/`);
  await assert.doesNotReject(page.getByRole('heading', { name: 'Signed in as Browser Tester' }).waitFor());
  assert.match(await page.content(), /browser@example\.com/);
  const cookies = await context.cookies(base);
  const session = cookies.find((c) => c.name === 'session')!;
  assert.equal(session.httpOnly, true);
  assert.equal(session.sameSite, 'Lax');
  mkdirSync('test-artifacts', { recursive: true });
  await page.screenshot({ path: 'test-artifacts/account-page.png', fullPage: true });

  // page.request resolves names in Node (no *.localhost there): ask /verify from a second tab of the same browser.
  const verifyStatus = async () => {
    const tab = await context.newPage();
    const res = await tab.goto(`${base}/web/_account/verify`);
    await tab.close();
    return res!.status();
  };
  assert.equal(await verifyStatus(), 200);

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL(`${base}/web/_account/`);
  await assert.doesNotReject(page.getByRole('heading', { name: 'Not signed in' }).waitFor());
  assert.equal(await verifyStatus(), 401);
  await context.close();
});
