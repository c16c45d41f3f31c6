// examples/todo in headless Chromium behind the real product: sign in with the development identity provider, add a
// todo, reload, it is there; save a webhook credential on the account page and the app sees it; another user sees none.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { type Browser, type BrowserContext, type Page } from 'playwright-core';
import { launchChromium } from '../helpers/browser.ts';
import { startProduct, type Product } from '../helpers/product.ts';
import { createTodoApp } from '../../examples/todo/app.ts';

let p: Product;
let browser: Browser;
let front: Server;
let app: Server | undefined;

before(async () => {
  // The app's port goes into APPS before the product starts; the app itself needs the product's URL: a front server
  // takes the port first and hands requests to the app once it exists.
  front = createServer((req, res) => app!.emit('request', req, res));
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
  const appPort = (front.address() as { port: number }).port;
  p = await startProduct({ APPS: JSON.stringify({ 'acme/todo': { url: `http://127.0.0.1:${appPort}`, requireSession: true } }) });
  app = await createTodoApp({ serverUrl: p.url, org: 'acme', repo: 'todo', baseDomain: p.config.baseDomain, secret: p.secret('acme', 'todo') });
  browser = await launchChromium();
});
after(async () => {
  await browser?.close();
  front?.close();
  await p?.close();
});

async function signedIn(email: string, name: string): Promise<{ context: BrowserContext; page: Page; base: string }> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const base = `http://acme.localhost:${new URL(p.url).port}`;
  await page.goto(`${base}/todo/`);
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Name').fill(name);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${base}/todo/`);
  return { context, page, base };
}

test('a signed-in user adds a todo, reloads and finds it; the webhook credential from the account page reaches the app; another user sees nothing', async () => {
  const ann = await signedIn('ann@example.com', 'Ann');
  await ann.page.getByRole('heading', { name: "Ann's todos" }).waitFor();
  await ann.page.getByLabel('New todo').fill('buy milk');
  await ann.page.getByRole('button', { name: 'Add' }).click();
  await ann.page.waitForURL(`${ann.base}/todo/`);
  await ann.page.reload();
  assert.deepEqual(await ann.page.locator('li').allInnerTexts(), ['buy milk']);
  assert.match(await ann.page.content(), /Webhook: none/);

  await ann.page.getByRole('link', { name: 'your account page' }).click();
  await ann.page.waitForURL(`${ann.base}/todo/_account/`);
  await ann.page.fill('#new-plugin', 'todo');
  await ann.page.fill('#new-name', 'webhook');
  await ann.page.fill('#new-value', JSON.stringify({ url: 'https://hooks.example.test/ann' }));
  await ann.page.click('text=Store credential');
  await ann.page.locator('.credential[data-plugin="todo"][data-name="webhook"]').waitFor();
  await ann.page.goto(`${ann.base}/todo/`);
  assert.match(await ann.page.content(), /Webhook: notifying <code>hooks\.example\.test<\/code>/);

  const bob = await signedIn('bob@example.com', 'Bob');
  await bob.page.getByRole('heading', { name: "Bob's todos" }).waitFor();
  assert.deepEqual(await bob.page.locator('li').allInnerTexts(), ['nothing yet']);
  assert.match(await bob.page.content(), /Webhook: none/);
  await ann.context.close();
  await bob.context.close();
});
