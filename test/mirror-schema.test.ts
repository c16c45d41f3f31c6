// A tenant's schema and mirror delivery (2026-11-26): reading a database's change log parses its whole schema, whose
// size the tenant picks (~30–80 ms a MB of trigger text), on its first read and again after any DDL. The delivery
// thread serves every org on the node, and it read the change logs itself: a tenant with ~10 MB of triggers writing
// DDL held it 0.3–1.9 s a read, so every other org's events waited (12 s median). Now a read that would parse a schema
// not known to be small is left to an executor (the tenant's fair share of them), and every other read stays in the
// thread: another org's events reach its mirror promptly, its reads never leave the thread, and the tenant's own
// events still all arrive in order.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { IN_THREAD_SCHEMA_BYTES } from '../src/mirror/delivery/change-log.ts';
import { FIRST_PERIOD_MS, MAX_PERIOD_MS, READ_BUDGET_MS, READ_WINDOW_MS, ReadBudget } from '../src/mirror/delivery/read-budget.ts';
import { startProduct, type HttpResult, type Product } from './helpers/product.ts';
import { newSecret, range, Receiver, waitFor } from './helpers/mirror.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** 34 triggers of ~300 KB: ~10 MB of schema, each read after DDL parses all of it. */
const TRIGGERS = 34;
const STEPS = 30_000;
const ATTACK_MS = 8000;
/** The victim's events may arrive this much later than in the baseline (before: 1–4 s late, stuck behind the parses). */
const MARGIN_MS = 500;
/** Databases of one repo, each with a schema parsed in the thread on its first read: ~0.3–0.7 s of parsing in all. */
const MANY = 60;

/** scopebase_mirror_change_log_reads_total by where the pages were read, and the budget's trips (a series not yet made is 0). */
async function reads(p: Product): Promise<{ thread: number; executor: number; trips: number }> {
  const text = await (await fetch(`${p.running.adminUrl}/metrics`)).text();
  const value = (series: string) => Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  const count = (by: string) => value(`scopebase_mirror_change_log_reads_total{by="${by}"}`);
  return { thread: count('thread'), executor: count('executor'), trips: value('scopebase_mirror_read_budget_trips_total') };
}

test('a tenant with a huge schema writing DDL does not hold up another org\'s mirror delivery; its own events all arrive in order', async (t) => {
  const receiver = await new Receiver().start();
  const arrived = new Map<string, number>(); // org/database/version → performance.now() at arrival
  receiver.behaviour = (_req, res, r) => {
    arrived.set(`${r.event.org}/${r.event.database}/${r.event.version}`, performance.now());
    res.writeHead(204).end();
  };
  const p = await startProduct({
    DB_MIRRORS: JSON.stringify([{ name: 'replica', url: receiver.url, secret: newSecret() }]),
    // Two executors per repo of three leave one to other repos; a schema this size takes seconds to make.
    DB_EXECUTORS: '3', DB_EXECUTORS_PER_REPO: '2', DB_QUERY_TIMEOUT_MS: '30000', DB_QUEUE_TIMEOUT_MS: '10000',
  });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  const ok = (res: HttpResult, what: string) => assert.equal(res.status, 200, `${what}: ${res.text.slice(0, 300)}`);
  /** The tenant's writes: its reads share its executors, which on a busy machine may refuse a write with a 503 (retry after a second). */
  const tenantWrite = async (statements: { sql: string }[], what: string) => {
    for (;;) {
      const res = await p.db('web', 'execute', { database: 'heavy', statements });
      if (res.status !== 503) return (ok(res, what), res);
      await sleep(1000);
    }
  };
  const trigger = (i: number) => `CREATE TRIGGER g${i} AFTER DELETE ON pad BEGIN ${'SELECT 0; '.repeat(STEPS)}END`;

  ok(await p.db('app', 'execute', { sql: 'CREATE TABLE notes(k)' }, { org: 'victim' }), 'the victim\'s table');

  /** The victim's writes: ms from each 200 to its event's arrival at the receiver. */
  const victimLags = async (ms: number): Promise<number[]> => {
    const answered = new Map<number, number>();
    for (const end = performance.now() + ms; performance.now() < end;) {
      const res = await p.db('app', 'execute', { sql: "INSERT INTO notes VALUES ('n')" }, { org: 'victim' });
      ok(res, 'a victim write');
      answered.set(res.json.version as number, performance.now());
      await sleep(50);
    }
    await waitFor(() => [...answered.keys()].every((v) => arrived.has(`victim/main/${v}`)), 60_000, 'the victim\'s events');
    return [...answered].map(([v, at]) => arrived.get(`victim/main/${v}`)! - at);
  };
  // The victim alone: every page read in the thread.
  const baseline = await victimLags(1500);
  const alone = await reads(p);

  await tenantWrite([{ sql: 'CREATE TABLE pad(x)' }, { sql: 'CREATE TABLE log(note)' }], 'the tenant\'s tables');
  for (let i = 0; i < TRIGGERS; i += 5) await tenantWrite(range(i, Math.min(i + 4, TRIGGERS - 1)).map((j) => ({ sql: trigger(j) })), 'the tenant\'s triggers');
  await waitFor(() => receiver.versions('heavy').length === 1 + Math.ceil(TRIGGERS / 5), 60_000, 'the tenant\'s set-up events');

  let stop = false;
  const acked: number[] = [];
  const attacker = (async () => {
    for (let i = 0; !stop; i++) {
      // DDL in every write: the next read of the change log parses the whole schema again.
      const res = await tenantWrite([{ sql: i % 2 ? 'DROP TABLE churn' : 'CREATE TABLE churn(x)' }, { sql: "INSERT INTO log VALUES ('x')" }], 'a tenant write');
      acked.push(res.json.version as number);
    }
  })();
  const during = await victimLags(ATTACK_MS);
  stop = true;
  await attacker;

  const max = (xs: number[]) => Math.max(...xs);
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  process.stderr.write(`victim lag: baseline median ${median(baseline).toFixed(0)} / max ${max(baseline).toFixed(0)} ms; during median ${median(during).toFixed(0)} / max ${max(during).toFixed(0)} ms over ${during.length} writes; ${acked.length} tenant writes\n`);
  assert.ok(acked.length >= 3, 'the tenant kept writing');
  assert.ok(max(during) < max(baseline) + MARGIN_MS, `the victim's events waited ${max(during).toFixed(0)} ms (baseline max ${max(baseline).toFixed(0)} ms)`);

  // The tenant's events: every one, in order, once each.
  const last = acked.at(-1)!;
  await waitFor(() => receiver.versions('heavy').at(-1) === last, 120_000, 'the tenant\'s events');
  assert.deepEqual(receiver.versions('heavy'), range(1, last));

  // Where the pages were read: the victim's in the thread before and after (with the tenant's reads moved meanwhile).
  const afterAttack = await reads(p);
  await victimLags(1000);
  const end = await reads(p);
  process.stderr.write(`pages read: victim alone ${JSON.stringify(alone)}; after the attack ${JSON.stringify(afterAttack)}; at the end ${JSON.stringify(end)}\n`);
  assert.equal(alone.executor, 0, 'the victim alone: no page left the thread');
  assert.ok(alone.thread > 0);
  assert.ok(afterAttack.executor > 0, 'the tenant\'s pages were read by executors');
  assert.equal(end.executor, afterAttack.executor, 'the victim\'s pages stayed in the thread while the tenant\'s left it');
  assert.ok(end.thread > afterAttack.thread);
});

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
  for (const database of databases) {
    const res = await p.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE pad(x)' }, { sql: trigger }] }, { org: 'many' });
    assert.equal(res.status, 200, res.text);
  }
  const file = join(p.dataDir, 'db/many/web/d1.sqlite');
  const bytes = ['', '-wal'].reduce((n, suffix) => n + (statSync(file + suffix, { throwIfNoEntry: false })?.size ?? 0), 0);
  assert.ok(bytes <= IN_THREAD_SCHEMA_BYTES, `each file (${bytes} bytes) is small enough for its schema to be parsed in the thread`);
  await waitFor(() => databases.every((d) => receiver.versions(d).length === 1), 60_000, 'every database\'s event');
  const counted = await reads(p);
  process.stderr.write(`pages read: ${JSON.stringify(counted)}; a database file and its WAL: ${bytes} bytes\n`);
  assert.equal(counted.trips, 1, 'the repo passed its budget once');
  assert.ok(counted.executor > 0 && counted.thread > 0, 'read in the thread until it passed the budget, then by executors');
});

test('the read budget: a repo past 200 ms in a 10 s window is read by executors for 30 s, twice as long each time it trips again, forgiven after a window within budget', () => {
  let now = 0;
  const budget = new ReadBudget(() => now);
  assert.equal(budget.spend('a/web', READ_BUDGET_MS), 0, 'up to the budget: still in the thread');
  assert.equal(budget.spend('b/web', READ_BUDGET_MS), 0, 'each repo has its own');
  now += READ_WINDOW_MS - 1;
  assert.equal(budget.spend('a/web', 1), FIRST_PERIOD_MS, 'past the budget within the window');
  assert.ok(budget.offThread('a/web'));
  assert.ok(!budget.offThread('b/web'));
  now += FIRST_PERIOD_MS;
  assert.ok(!budget.offThread('a/web'), 'the thread tries again after the period');
  assert.equal(budget.spend('a/web', READ_BUDGET_MS + 1), 2 * FIRST_PERIOD_MS, 'tripping again: twice the period');
  let period = 2 * FIRST_PERIOD_MS;
  for (let i = 0; i < 6; i++) {
    now += period;
    period = budget.spend('a/web', READ_BUDGET_MS + 1);
  }
  assert.equal(period, MAX_PERIOD_MS, 'up to the cap');
  now += period;
  budget.spend('a/web', 10);
  now += READ_WINDOW_MS;
  budget.sweep(); // a whole window within budget
  assert.equal(budget.spend('a/web', READ_BUDGET_MS + 1), FIRST_PERIOD_MS, 'forgiven: the first period again');
  now += READ_WINDOW_MS;
  assert.equal(budget.spend('b/web', 1), 0, 'a new window: b\'s earlier reads no longer count');
});
