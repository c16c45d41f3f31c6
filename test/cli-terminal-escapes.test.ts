// What the CLI prints for a person comes from the server: a tenant's values and names (an app's users wrote some of
// them), and errors quoting them. Printed raw, an ESC sequence in them acted on the terminal of whoever ran
// `scopebase query`, `status` or `shell` (set its title, wrote its clipboard with OSC 52), and a lone CR rewrote the
// line shown. They are printed as visible escapes (\x1b); --json is unchanged (JSON escapes them itself).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { startProduct, ROOT_KEY, type Product } from './helpers/product.ts';
import { runCli } from './helpers/cli.ts';

const OSC52 = '\x1b]52;c;ZWNobyBwd25lZA==\x07'; // would put "echo pwned" on the clipboard
const TITLE = '\x1b]0;owned\x07';
const CSI = '\x9b2J'; // C1 CSI: clear the screen, on terminals that take 8-bit controls

let p: Product;
let env: Record<string, string | undefined>;
before(async () => {
  p = await startProduct();
  env = { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, PORT: new URL(p.url).port, BASE_DOMAIN: 'localhost', DATA_DIR: join(p.dataDir, 'none') };
  const made = await p.db('web', 'execute', { statements: [
    { sql: `CREATE TABLE "notes${TITLE}" ("body${CSI}" TEXT)` },
    { sql: `INSERT INTO "notes${TITLE}" VALUES (?), (?)`, params: [`hi${OSC52}`, 'real\rfake'] },
  ] });
  assert.equal(made.status, 200, made.text);
});
after(() => p.close());

/** Nothing a terminal acts on: no ESC, no C1 control, no CR (LF and tab are layout). */
function inert(text: string, what: string): void {
  assert.doesNotMatch(text, /[\x00-\x08\x0b-\x1f\x7f-\x9f]/, `${what} holds a control character: ${JSON.stringify(text)}`); // eslint-disable-line no-control-regex
}

test('query prints values and column names with their control characters as escapes', async () => {
  const r = await runCli(['query', 'acme/web', `SELECT * FROM "notes${TITLE}"`], env);
  assert.equal(r.code, 0, r.stderr);
  inert(r.stdout, 'stdout');
  assert.match(r.stdout, /hi\\x1b\]52;c;ZWNobyBwd25lZA==\\x07/);
  assert.match(r.stdout, /real\\x0dfake/);
  assert.match(r.stdout, /body\\x9b2J/);
});

test('--json keeps the values exact', async () => {
  const r = await runCli(['query', 'acme/web', `SELECT * FROM "notes${TITLE}"`, '--json'], env);
  assert.equal(r.code, 0, r.stderr);
  assert.ok(r.stdout.includes(JSON.stringify(`hi${OSC52}`)), r.stdout);
});

test('status prints table names with their control characters as escapes', async () => {
  const r = await runCli(['status', 'acme/web'], env);
  assert.equal(r.code, 0, r.stderr);
  inert(r.stdout, 'stdout');
  assert.match(r.stdout, /notes\\x1b\]0;owned\\x07/);
});

test('an error that quotes a tenant\'s name is printed with the name\'s control characters as escapes', async () => {
  const r = await runCli(['query', 'acme/web', `SELECT * FROM "nope${TITLE}"`], env);
  assert.equal(r.code, 1, r.stderr);
  inert(r.stderr, 'stderr');
  assert.match(r.stderr, /nope\\x1b\]0;owned/);
});

test('shell: .schema and an error print control characters as escapes', async () => {
  const r = await runCli(['shell', 'acme/web'], env, `.schema\nSELECT * FROM "gone${TITLE}";\n`);
  inert(r.stdout, 'stdout');
  inert(r.stderr, 'stderr');
  assert.match(r.stdout, /CREATE TABLE "notes\\x1b\]0;owned\\x07"/);
  assert.match(r.stderr, /gone\\x1b\]0;owned\\x07/);
});
