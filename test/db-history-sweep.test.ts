// Time travel's bounds on databases nobody writes (SPEC 4.11, src/db/history/DESIGN.md "Bounds"): history was pruned
// only when a database's writer closed a segment, so an idle database kept versions past DB_HISTORY_DAYS, and a repo
// of idle databases sat above DB_HISTORY_MAX_BYTES_PER_REPO (their current segments were never counted against it),
// until their next write. The background sweep prunes them. Days pass on the product's own clock (the clock-shift
// preload offsets Date in every process of the product); the product runs as a real process tree on real files.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY, type SpawnedProduct } from './helpers/product.ts';
import { waitFor } from './helpers/mirror.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const PRELOAD = fileURLToPath(new URL('./helpers/clock-shift.ts', import.meta.url));
const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const MIB = 1024 ** 2;

interface Running { product: SpawnedProduct; dataDir: string; shiftClock(ms: number): Promise<void> }
const started: { product: SpawnedProduct; dataDir: string }[] = [];
after(() => {
  for (const { product, dataDir } of started) {
    product.killAll();
    rmSync(dataDir, { recursive: true, force: true });
  }
});

async function start(env: Record<string, string>): Promise<Running> {
  const dataDir = tempDir('scopebase-history-sweep-');
  const clockFile = join(dataDir, 'clock-shift');
  writeFileSync(clockFile, '0');
  const product = await spawnProduct(testEnv(dataDir, { DB_HISTORY_SWEEP_MS: '100', CLOCK_SHIFT_FILE: clockFile, NODE_OPTIONS: `--import=${PRELOAD}`, ...env }));
  started.push({ product, dataDir });
  const shiftClock = async (ms: number) => {
    writeFileSync(clockFile, String(ms));
    await new Promise((r) => setTimeout(r, 200)); // the preload reads the file every 50 ms
  };
  return { product, dataDir, shiftClock };
}

const db = (r: Running, op: string, body: unknown) => call(r.product.url, 'localhost', `/web/_db/${op}`, {
  body, headers: { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` },
});

/** A database of one 1 MiB value rewritten `writes` times: ~1 MiB of page images a commit (a segment closes past 16 MiB). */
async function churn(r: Running, database: string, writes: number): Promise<number> {
  const made = await db(r, 'execute', { database, statements: [{ sql: 'CREATE TABLE big(id INTEGER PRIMARY KEY, b BLOB)' }, { sql: 'INSERT INTO big VALUES (1, randomblob(1048576))' }] });
  assert.equal(made.status, 200, made.text);
  let version = made.json.version as number;
  for (let i = 0; i < writes; i++) {
    const w = await db(r, 'execute', { database, sql: 'UPDATE big SET b = randomblob(1048576) WHERE id = 1' });
    assert.equal(w.status, 200, w.text);
    version = w.json.version;
  }
  return version;
}

const history = async (r: Running, database: string) => (await db(r, 'status', { database })).json.history as { oldestVersion: number | null; oldestTime: string | null };

/** Bytes of every file under `dir`. */
function bytesUnder(dir: string): number {
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).reduce((n, e) => n + statSync(join(e.parentPath, e.name)).size, 0);
}

test('an idle database\'s history past DB_HISTORY_DAYS is dropped without a write: its versions from before the window are gone (410), the rest restorable', async () => {
  const r = await start({ DB_HISTORY_DAYS: '1' });
  const last = await churn(r, 'a', 20); // two segments: the first closed (past 16 MiB of log), the second current
  assert.equal((await history(r, 'a')).oldestVersion, 0, 'premise: all of it is kept');
  const before = bytesUnder(join(r.dataDir, 'history', 'acme', 'web', 'a'));
  await r.shiftClock(2 * DAY); // nothing is written to it since
  await waitFor(async () => ((await history(r, 'a')).oldestVersion ?? 0) > 1, 15_000, 'the idle database\'s closed segment to go');
  const after = bytesUnder(join(r.dataDir, 'history', 'acme', 'web', 'a'));
  assert.ok(after < before - 15 * MIB, `the disk came back: ${before} → ${after} bytes`);
  const gone = await db(r, 'restore', { database: 'a', toVersion: 1, dryRun: true });
  assert.equal(gone.status, 410, gone.text);
  const oldest = (await history(r, 'a')).oldestVersion!;
  assert.equal(gone.json.error.details.oldestVersion, oldest);
  // The segment holding the version in force when the window began stays (it is the current one): still restorable.
  assert.equal((await db(r, 'restore', { database: 'a', toVersion: oldest, dryRun: true })).status, 200);
  // Half a day ago on the product's clock (the test's runs 2 days behind it): inside the window, the version then.
  const back = await db(r, 'restore', { database: 'a', toTime: new Date(Date.now() + 1.5 * DAY).toISOString(), dryRun: true });
  assert.equal(back.status, 200, `a time inside the window is restorable: ${back.text}`);
  assert.equal(back.json.restoredTo.version, last);
});

test('a repo\'s idle databases are brought under DB_HISTORY_MAX_BYTES_PER_REPO, current segments counted, the oldest history first; the first write after begins it again', async () => {
  const cap = 32 * MIB;
  const r = await start({ DB_HISTORY_DAYS: '7', DB_HISTORY_MAX_BYTES: String(cap), DB_HISTORY_MAX_BYTES_PER_REPO: String(cap) });
  // Three databases of ~13 MiB of history each, none past 16 MiB of log: no segment ever closes, 39 MiB in the repo.
  for (const name of ['d1', 'd2', 'd3']) await churn(r, name, 12);
  const repoDir = join(r.dataDir, 'history', 'acme', 'web');
  assert.ok(bytesUnder(repoDir) > cap, `premise: the repo is over its cap (${bytesUnder(repoDir)} bytes)`);
  await new Promise((res) => setTimeout(res, 1000));
  assert.equal((await history(r, 'd1')).oldestVersion, 0, 'a database written within the hour keeps its current segment');
  await r.shiftClock(2 * HOUR); // all three idle for two hours
  await waitFor(async () => (await history(r, 'd1')).oldestVersion === null, 15_000, 'the oldest database\'s history to go');
  assert.ok(bytesUnder(repoDir) <= cap, `the repo holds ${bytesUnder(repoDir)} bytes of history, within ${cap}`);
  assert.deepEqual([(await history(r, 'd2')).oldestVersion, (await history(r, 'd3')).oldestVersion], [0, 0], 'the newer ones keep all theirs');
  const gone = await db(r, 'restore', { database: 'd1', toVersion: 5 });
  assert.equal(gone.status, 410, gone.text);
  assert.match(gone.json.error.message, /DB_HISTORY_MAX_BYTES_PER_REPO/);
  // A time inside the window, since its last write (an hour ago on the product's clock), is still its version: a no-op.
  const since = await db(r, 'restore', { database: 'd1', toTime: new Date(Date.now() + HOUR).toISOString(), dryRun: true });
  assert.equal(since.status, 200, since.text);
  assert.equal(since.json.restoredTo.version, since.json.version);
  // The next writes begin it again (an executor's archiver may still hold the dropped segment open): restorable, exactly.
  const rows = async () => (await db(r, 'query', { database: 'd1', sql: 'SELECT count(*) FROM big' })).json.results[0].rows[0][0];
  const w1 = await db(r, 'execute', { database: 'd1', sql: 'INSERT INTO big VALUES (2, x\'00\')' });
  const w2 = await db(r, 'execute', { database: 'd1', sql: 'INSERT INTO big VALUES (3, x\'00\')' });
  assert.deepEqual([w1.status, w2.status], [200, 200], w1.text + w2.text);
  const begun = (await history(r, 'd1')).oldestVersion!;
  assert.ok(begun === w1.json.version - 1 || begun === w1.json.version, `history begins again at the first write after (or the version before it): ${begun}`);
  const undo = await db(r, 'restore', { database: 'd1', toVersion: w1.json.version });
  assert.equal(undo.status, 200, undo.text);
  assert.equal(await rows(), 2);
  const redo = await db(r, 'restore', { database: 'd1', toVersion: w2.json.version });
  assert.equal(redo.status, 200, redo.text);
  assert.equal(await rows(), 3);
});
