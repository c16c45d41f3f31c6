// `scopebase history` on a database whose change log dropped its oldest events (SPEC 4.9: kept 1,000 events or 7
// days at least): a page reaching past them lists from the oldest kept and says so, instead of failing on 410 gone.
// The product's clock is moved 8 days ahead (test/helpers/clock-shift.ts) so the first events are old enough to go.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY, type SpawnedProduct } from './helpers/product.ts';
import { cliAgainst } from './helpers/cli.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const PRELOAD = fileURLToPath(new URL('./helpers/clock-shift.ts', import.meta.url));
const DAY = 24 * 3_600_000;

let product: SpawnedProduct;
const work = tempDir('scopebase-cli-pruned-');
const cli = cliAgainst(work, () => new URL(product.url).port, ROOT_KEY);
const execute = (sql: string) => call(product.url, 'localhost', '/web/_db/execute', {
  body: { sql }, headers: { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` },
});

before(async () => {
  const clockFile = join(work, 'clock-shift');
  writeFileSync(clockFile, '0');
  product = await spawnProduct(testEnv(join(work, 'data'), { DB_SYNC: 'normal', CLOCK_SHIFT_FILE: clockFile, NODE_OPTIONS: `--import=${PRELOAD}` }));
  assert.equal((await execute('CREATE TABLE t(x)')).status, 200);
  for (let v = 2; v <= 150; v++) assert.equal((await execute(`INSERT INTO t VALUES (${v})`)).status, 200);
  writeFileSync(clockFile, String(8 * DAY));
  await new Promise((r) => setTimeout(r, 200)); // the preload reads the file every 50 ms
  // At version 1,100 the log drops what is past both bounds: versions up to 100, 8 days old now.
  for (let v = 151; v <= 1100; v++) assert.equal((await execute(`INSERT INTO t VALUES (${v})`)).status, 200);
});
after(() => product.killAll());

test('a page past the change log\'s oldest event lists from it and says the older ones are no longer in the log', async () => {
  const r = await cli(['history', 'acme/web', '--before', '105', '--limit', '10']);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(r.stdout.trimEnd().split('\n').slice(5).map((l) => Number(l.trim().split(/\s+/)[0])), [104, 103, 102, 101]);
  assert.match(r.stderr, /^\(4 versions; .*versions before 101 are no longer in the change log\)\n$/);
  assert.doesNotMatch(r.stderr, /--before/, 'no older page to offer');
  const json = JSON.parse((await cli(['history', 'acme/web', '--before', '101', '--json'])).stdout);
  assert.deepEqual([json.versions, json.next, json.changeLogFrom], [[], null, 101]);
  const newest = JSON.parse((await cli(['history', 'acme/web', '--limit', '3', '--json'])).stdout);
  assert.deepEqual(newest.versions.map((v: { version: number }) => v.version), [1100, 1099, 1098]);
  assert.deepEqual([newest.next, newest.changeLogFrom], [{ before: 1098 }, null]);
});
