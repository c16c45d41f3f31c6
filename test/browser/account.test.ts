// End to end in headless Chromium: sign in through the proxy with the development provider, see the account page, sign out.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { type Browser } from 'playwright-core';
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
  await page.waitForURL(`${base}/web/_account/?signed_out=1`);
  await assert.doesNotReject(page.getByRole('heading', { name: 'Signed out' }).waitFor());
  assert.match(await page.getByRole('status').innerText(), /You are signed out of acme on this browser/);
  assert.equal(await verifyStatus(), 401);
  await context.close();
});

test('a repo without an app: its root is a landing page; signing in from it (or with no return_to) ends signed in', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const base = `http://acme.localhost:${p.port}`;
  const landing = await page.goto(`${base}/web/`);
  assert.equal(landing!.status(), 200);
  await assert.doesNotReject(page.getByRole('heading', { name: 'acme/web' }).waitFor());
  assert.match(await page.locator('main').innerText(), /You are not signed in[\s\S]*Databases[\s\S]*\/web\/_db\/query/);
  await page.getByRole('link', { name: 'Sign in' }).click();
  await page.getByLabel('Email').fill('lander@example.com');
  await page.getByLabel('Name').fill('Lan Der');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/web/`);
  assert.match(await page.locator('main').innerText(), /Signed in as Lan Der/);
  await page.getByRole('link', { name: 'Your account' }).click();
  await page.waitForURL(`${base}/web/_account/`);
  // Dates in one human format.
  assert.match(await page.locator('main').innerText(), /Session expires\s+\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC/);
  await context.close();

  // A sign-in without return_to lands on /{repo}/ (SPEC 7): for a repo without an app, its landing page, signed in.
  const fresh = await browser.newContext();
  const tab = await fresh.newPage();
  await tab.goto(`${base}/site/_account/login`);
  await tab.getByLabel('Email').fill('direct@example.com');
  await tab.getByRole('button', { name: 'Sign in' }).click();
  await tab.waitForURL(`${base}/site/`);
  assert.match(await tab.locator('main').innerText(), /Signed in as Dev User/);
  await fresh.close();
});

test('every card starts at its padding: no heading or line pushed down by its own margin (the look was uneven)', async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const base = `http://acme.localhost:${p.port}`;
  /** For each card, how far below its top edge its first line of content begins, in CSS pixels. */
  const gaps = () => page.locator('.card').evaluateAll((cards) => cards.map((card) => {
    const first = [...card.children].find((c) => getComputedStyle(c).display !== 'none' && !(c instanceof HTMLImageElement))!;
    return { card: card.textContent!.trim().slice(0, 30), gap: Math.round(first.getBoundingClientRect().top - card.getBoundingClientRect().top) };
  }));
  await page.goto(`${base}/web/nowhere`); // an error page's card
  await page.goto(`${base}/web/_account/login?return_to=${encodeURIComponent('/web/_account/')}`);
  await page.getByLabel('Email').fill('cards@example.com');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/web/_account/`);
  const seen = [...await gaps()];
  for (const path of ['/web/', '/web/nowhere']) {
    await page.goto(`${base}${path}`);
    seen.push(...await gaps());
  }
  assert.ok(seen.length >= 5, JSON.stringify(seen));
  // The card's padding (1rem) and its border: a heading's or paragraph's own top margin on top of that was 2rem more.
  for (const { card, gap } of seen) assert.ok(gap <= 18, `card "${card}…" begins ${gap}px below its edge`);
  await context.close();
});
