// In a real browser (headless Chromium), JavaScript off: store a credential on the account page, see it listed
// without its value, replace and delete it. The session is a real one in the account store (test/helpers/session.ts),
// resolved by the real account service; signing in through the development identity provider is its own test.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { type Browser } from 'playwright-core';
import { CHROMIUM, launchChromium } from './helpers/browser.ts';
import { startCredentialsProduct, type CredProduct } from './helpers/credentials-product.ts';
import { signInUser } from './helpers/session.ts';

const skip = existsSync(CHROMIUM) ? false : `no Chromium at ${CHROMIUM}`;

let p: CredProduct;
let browser: Browser;

before(async () => {
  if (skip) return;
  p = await startCredentialsProduct();
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
  await p?.close();
});

test('store a credential on the account page; it is listed by name and fields, never by value', { skip, timeout: 60_000 }, async () => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const origin = `http://acme.localhost:${new URL(p.url).port}`;
  const marker = `BROWSER-${randomBytes(10).toString('hex')}`;

  const { cookie } = await signInUser(p, 'acme', 'browser');
  const [name, value] = cookie.split('=') as [string, string];
  await context.addCookies([{ name, value, url: origin, httpOnly: true, sameSite: 'Lax' }]);
  await page.goto(`${origin}/web/_account/`);
  assert.match(await page.textContent('h1') ?? '', /Your account/);

  // Add a JSON credential.
  await page.fill('#new-plugin', 'github');
  await page.fill('#new-name', 'app');
  await page.fill('#new-value', JSON.stringify({ clientId: 'cid', clientSecret: marker }));
  await page.selectOption('#new-type', 'json');
  await page.click('text=Store credential');
  await page.waitForURL(`${origin}/web/_account/?credentials=created`);
  const card = page.locator('.credential[data-plugin="github"][data-name="app"]');
  assert.equal(await card.count(), 1);
  const cardText = await card.innerText();
  assert.match(cardText, /clientId/);
  assert.match(cardText, /clientSecret/);
  assert.match(await page.locator('[role=status]').innerText(), /Credential stored/);
  let html = await page.content();
  assert.ok(!html.includes(marker), 'the value is shown on the page');
  assert.match(await page.locator('table.audit').innerText(), /create\s+github\/app\s+you/);

  // The runtime reads it with the repo's secret.
  const userId = (await page.locator('dt:text-is("User id") + dd').innerText()).trim();
  const read = await p.call(`/web/_account/credentials/github/app?user=${encodeURIComponent(userId)}`, { headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } });
  assert.deepEqual(read.json.value, { clientId: 'cid', clientSecret: marker });

  // The browser, with its cookie, cannot read the value.
  const direct = await page.goto(`${origin}/web/_account/credentials/github/app`);
  assert.equal(direct?.status(), 403);
  assert.ok(!(await page.content()).includes(marker));

  // Replace with a text value, then delete.
  await page.goto(`${origin}/web/_account/`);
  await card.locator('summary').click();
  await card.locator('textarea[name=value]').fill(`plain-${marker}`);
  await card.locator('button', { hasText: 'Replace' }).click();
  await page.waitForURL(`${origin}/web/_account/?credentials=replaced`);
  assert.match(await card.innerText(), /a text value/);
  html = await page.content();
  assert.ok(!html.includes(marker));
  await card.locator('button', { hasText: 'Delete' }).click();
  await page.waitForURL(`${origin}/web/_account/?credentials=deleted`);
  assert.equal(await page.locator('.credential').count(), 0);
  const audit = await page.locator('table.audit').innerText();
  for (const action of ['create', 'read', 'replace', 'delete']) assert.match(audit, new RegExp(`${action}\\s+github/app`));
  assert.ok(!p.logs().includes(marker));
  await context.close();
});

test('sign in through the development identity provider lands on the account page', {
  skip,
  timeout: 30_000,
}, async () => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const origin = `http://acme.localhost:${new URL(p.url).port}`;
  await page.goto(`${origin}/web/_account/login?return_to=${encodeURIComponent('/web/_account/')}`);
  await page.fill('#email', 'browser-idp@example.com');
  await page.click('button[type=submit]');
  try {
    await page.waitForURL(`${origin}/web/_account/`, { timeout: 10_000 });
    assert.match(await page.textContent('h1') ?? '', /Your account/);
    assert.equal(await page.locator('#credentials').count(), 1);
  } finally {
    await context.close();
  }
});

test('the add form says the name rule, and a JSON value that did not parse keeps "JSON object" chosen', { skip, timeout: 60_000 }, async () => {
  const context = await browser.newContext({ javaScriptEnabled: false });
  const page = await context.newPage();
  const origin = `http://acme.localhost:${new URL(p.url).port}`;
  const { cookie } = await signInUser(p, 'acme', 'rules');
  const [name, value] = cookie.split('=') as [string, string];
  await context.addCookies([{ name, value, url: origin, httpOnly: true, sameSite: 'Lax' }]);
  await page.goto(`${origin}/web/_account/`);
  // Chromium refuses it and shows the title (the rule) under its own "Please match the requested format."
  await page.fill('#new-plugin', 'GitHub');
  assert.equal(await page.$eval('#new-plugin', (el) => (el as HTMLInputElement).validity.patternMismatch), true);
  assert.equal(await page.getAttribute('#new-plugin', 'title'), 'lowercase letters, digits, ".", "_" or "-", starting with a letter or digit, up to 64');
  assert.match(await page.locator('#name-rule').innerText(), /Plugin and name: lowercase letters, digits/);
  assert.equal(await page.getAttribute('#new-name', 'title'), await page.getAttribute('#new-plugin', 'title'));

  await page.fill('#new-plugin', 'github');
  await page.fill('#new-name', 'app');
  await page.fill('#new-value', '{"token": oops}');
  await page.selectOption('#new-type', 'json');
  await page.click('text=Store credential');
  await page.waitForURL(/problem=value_json/);
  assert.match(await page.locator('[role=alert]').innerText(), /The value is not valid JSON/);
  assert.equal(await page.inputValue('#new-type'), 'json', 'the kind stays "JSON object"');
  // The kind the message names is one the list offers, by that name (it said "Text"; the list, "text (…)").
  const named = /choose "([^"]+)"/.exec(await page.locator('[role=alert]').innerText())![1]!;
  assert.ok((await page.locator('#new-type option').allInnerTexts()).some((o) => o.startsWith(named)), `an option "${named}…"`);
  // The corrected value is then stored as an object, not as a string.
  await page.fill('#new-value', '{"token": "ok"}');
  await page.click('text=Store credential');
  await page.waitForURL(`${origin}/web/_account/?credentials=created`);
  assert.match(await page.locator('.credential[data-plugin="github"][data-name="app"]').innerText(), /token/);
  await context.close();
});
