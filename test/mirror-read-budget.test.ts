// The delivery thread's read budget (src/mirror/delivery/read-budget.ts): a repo whose change-log reads take more of the
// thread than READ_BUDGET_MS in a window has them read by executors for a period, doubling while it keeps tripping.
// Through the product: a repo of many databases, each schema small enough to be parsed in the thread on its first
// read, passes the budget; and the periods themselves, on a clock of the test's own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { IN_THREAD_SCHEMA_BYTES } from '../src/mirror/delivery/change-log.ts';
import { FIRST_PERIOD_MS, FREE_READ_MS, MAX_PERIOD_MS, READ_BUDGET_MS, READ_WINDOW_MS, ReadBudget } from '../src/mirror/delivery/read-budget.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { changeLogReads as reads, newSecret, range, Receiver, waitFor } from './helpers/mirror.ts';

/** Databases of one repo, each with a schema parsed in the thread on its first read: ~0.3–0.7 s of parsing in all. */
const MANY = 60;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** What was counted since `before` (the counters are the process's: every test in this file counts into them). */
async function readsSince(p: Product, before: Awaited<ReturnType<typeof reads>>): Promise<Awaited<ReturnType<typeof reads>>> {
  await sleep(200); // the thread reports its counts every 10 ms
  const now = await reads(p);
  return { thread: now.thread - before.thread, executor: now.executor - before.executor, trips: now.trips - before.trips };
}
/** How long the busy repo writes, as fast as 16 writers can (~250–1,000 writes/s here). */
const BUSY_MS = 8000;

test('a repo whose reads in the thread pass their budget (many databases, each schema parsed there) is read by executors for a while; its events all arrive', async (t) => {
  const receiver = await new Receiver().start();
  const p = await startProduct({ DB_MIRRORS: JSON.stringify([{ name: 'replica', url: receiver.url, secret: newSecret() }]) });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  // ~150 KB of trigger per database: small enough to be parsed in the thread (~5–12 ms), which each first read does.
  const trigger = `CREATE TRIGGER g AFTER DELETE ON pad BEGIN ${'SELECT 0; '.repeat(15_000)}END`;
  const databases = range(1, MANY).map((i) => `d${i}`);
  const before = await reads(p);
  for (const database of databases) {
    const res = await p.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE pad(x)' }, { sql: trigger }] }, { org: 'many' });
    assert.equal(res.status, 200, res.text);
  }
  const file = join(p.dataDir, 'db/many/web/d1.sqlite');
  const bytes = ['', '-wal'].reduce((n, suffix) => n + (statSync(file + suffix, { throwIfNoEntry: false })?.size ?? 0), 0);
  assert.ok(bytes <= IN_THREAD_SCHEMA_BYTES, `each file (${bytes} bytes) is small enough for its schema to be parsed in the thread`);
  await waitFor(() => databases.every((d) => receiver.versions(d).length === 1), 60_000, 'every database\'s event');
  const counted = await readsSince(p, before);
  process.stderr.write(`pages read: ${JSON.stringify(counted)}; a database file and its WAL: ${bytes} bytes\n`);
  assert.equal(counted.trips, 1, 'the repo passed its budget once');
  assert.ok(counted.executor > 0 && counted.thread > 0, 'read in the thread until it passed the budget, then by executors');
});

test('a busy repo (hundreds of writes a second, two mirrors) stays read in the thread: quick reads do not add up to the budget', async (t) => {
  const receivers = [await new Receiver().start(), await new Receiver().start()];
  const mirrors = receivers.map((r, i) => ({ name: `m${i}`, url: r.url, secret: newSecret() }));
  const p = await startProduct({ DB_MIRRORS: JSON.stringify(mirrors) });
  t.after(async () => {
    await p.close();
    for (const r of receivers) await r.stop();
  });
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(v)' })).status, 200);
  const before = await reads(p); // the counters are the process's: other tests in this file counted too
  let last = 0;
  const end = performance.now() + BUSY_MS;
  await Promise.all(range(1, 16).map(async () => {
    while (performance.now() < end) {
      const res = await p.db('web', 'execute', { sql: 'INSERT INTO t VALUES (1)' });
      assert.equal(res.status, 200, res.text);
      last = Math.max(last, res.json.version as number);
    }
  }));
  await waitFor(() => receivers.every((r) => r.versions().at(-1) === last), 60_000, 'every event at both mirrors');
  const counted = await readsSince(p, before);
  process.stderr.write(`${last} writes in ${BUSY_MS} ms; pages read: ${JSON.stringify(counted)}\n`);
  assert.equal(counted.trips, 0, 'quick reads never trip the budget');
  // The schema gate's one read per mirror: the file (with its WAL) passes 256 KiB within a second here, and a mirror
  // whose thread connection had not parsed the schema by then asks an executor its size once (it failed 1 run in 2).
  assert.ok(counted.executor <= mirrors.length, `at most one executor read per mirror: ${JSON.stringify(counted)}`);
  assert.ok(counted.thread > 10 * mirrors.length, `the pages are read in the thread: ${JSON.stringify(counted)}`);
  for (const r of receivers) assert.deepEqual(r.versions(), range(1, last));
});

test('the read budget: past 200 ms in a 10 s window (of each read, what passed 1 ms), a repo is read by executors for 30 s, twice as long each time it trips again, forgiven after a window within budget', () => {
  let now = 0;
  const budget = new ReadBudget(() => now);
  const read = (repo: string, ms: number) => budget.spend(repo, FREE_READ_MS + ms); // a read costing `ms` past the free part
  for (let i = 0; i < 100_000; i++) assert.equal(budget.spend('busy/web', 0.9 * FREE_READ_MS), 0, 'quick reads, however many, count nothing');
  assert.equal(read('a/web', READ_BUDGET_MS), 0, 'up to the budget: still in the thread');
  assert.equal(read('b/web', READ_BUDGET_MS), 0, 'each repo has its own');
  now += READ_WINDOW_MS - 1;
  assert.equal(read('a/web', 1), FIRST_PERIOD_MS, 'past the budget within the window');
  assert.ok(budget.offThread('a/web'));
  assert.ok(!budget.offThread('b/web'));
  now += FIRST_PERIOD_MS;
  assert.ok(!budget.offThread('a/web'), 'the thread tries again after the period');
  assert.equal(read('a/web', READ_BUDGET_MS + 1), 2 * FIRST_PERIOD_MS, 'tripping again: twice the period');
  let period = 2 * FIRST_PERIOD_MS;
  for (let i = 0; i < 6; i++) {
    now += period;
    period = read('a/web', READ_BUDGET_MS + 1);
  }
  assert.equal(period, MAX_PERIOD_MS, 'up to the cap');
  now += period;
  read('a/web', 10);
  now += READ_WINDOW_MS;
  budget.sweep(); // a whole window within budget
  assert.equal(read('a/web', READ_BUDGET_MS + 1), FIRST_PERIOD_MS, 'forgiven: the first period again');
  now += READ_WINDOW_MS;
  assert.equal(read('b/web', 1), 0, 'a new window: b\'s earlier reads no longer count');
});
