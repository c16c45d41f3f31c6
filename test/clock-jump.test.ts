// A wall-clock jump of the product's processes (test/helpers/clock-shift.ts, a preload that offsets Date): what
// measures elapsed time must not be fooled by it. Found by `npm run faults`: after the clock went 4 h back, every
// request of a repo got 429 "try again in 14399 s", since the per-repo token bucket refilled by wall-clock time.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY, type SpawnedProduct } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const PRELOAD = fileURLToPath(new URL('./helpers/clock-shift.ts', import.meta.url));
const HOUR = 3_600_000;
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

let product: SpawnedProduct;
let clockFile: string;
const shiftClock = async (ms: number) => {
  writeFileSync(clockFile, String(ms));
  await pause(200); // the preload reads the file every 50 ms
};
const db = (repo: string, op: string, body: unknown) => call(product.url, 'localhost', `/${repo}/_db/${op}`, {
  body, headers: { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', repo)}` },
});

before(async () => {
  const dataDir = tempDir();
  clockFile = join(dataDir, 'clock-shift');
  writeFileSync(clockFile, '0');
  product = await spawnProduct(testEnv(dataDir, {
    DB_RATE_LIMIT_PER_REPO: '20', DB_RATE_LIMIT_BURST: '20', CLOCK_SHIFT_FILE: clockFile, NODE_OPTIONS: `--import=${PRELOAD}`,
  }));
});
after(() => product.killAll());

test('after the wall clock jumps back an hour, a repo under its rate limit is still served (not 429 for an hour)', async () => {
  assert.equal((await db('web', 'execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
  for (let i = 0; i < 5; i++) assert.equal((await db('web', 'execute', { sql: 'INSERT INTO t VALUES (?)', params: [i] })).status, 200);
  await shiftClock(-HOUR);
  const replies = [];
  for (let i = 0; i < 5; i++) {
    replies.push(await db('web', 'execute', { sql: 'INSERT INTO t VALUES (?)', params: [10 + i] }));
    await pause(60); // well under 20 requests a second
  }
  assert.deepEqual(replies.map((r) => r.status), [200, 200, 200, 200, 200], replies.map((r) => r.text).join('\n'));
  // The jump did reach the product: the change log's times went back by about an hour.
  const changes = await db('web', 'changes', { since: 0 });
  const times = (changes.json.events as { committedAt: string }[]).map((e) => Date.parse(e.committedAt));
  assert.ok(times.at(-1)! < Date.now() - HOUR + 60_000 && times.at(-1)! > Date.now() - HOUR - 60_000, `last committedAt ${new Date(times.at(-1)!).toISOString()}`);
  assert.ok(times[0]! > Date.now() - 60_000, 'the first writes were at the real time');
});

test('after it jumps ahead and back again, the limit still holds: a flood past the burst gets 429 with a short Retry-After', async () => {
  await shiftClock(2 * HOUR);
  await shiftClock(0);
  // 100 at once: past the burst of 20 even if a loaded machine spreads them over a few seconds (20 a second refill).
  const replies = await Promise.all(Array.from({ length: 100 }, () => db('site', 'execute', { sql: 'SELECT 1' })));
  const limited = replies.filter((r) => r.status === 429);
  assert.ok(limited.length >= 10, `${limited.length} of 100 limited`);
  for (const r of limited) assert.ok(Number(r.headers['retry-after']) <= 2, `Retry-After ${r.headers['retry-after']}`);
});
