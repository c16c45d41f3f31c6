// A tenant's schema and mirror delivery (2026-11-26): reading a database's change log parses its whole schema, whose
// size the tenant picks (~30–80 ms a MB of trigger text), on its first read and again after any DDL. The delivery
// thread serves every org on the node, and it read the change logs itself: a tenant with ~10 MB of triggers writing
// DDL held it 0.3–1.9 s a read, so every other org's events waited (12 s median). Now a read that would parse a schema
// not known to be small is left to an executor (the tenant's fair share of them), and every other read stays in the
// thread: another org's events reach its mirror promptly, its reads never leave the thread, and the tenant's own
// events still all arrive in order.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type HttpResult } from './helpers/product.ts';
import { changeLogReads as reads, newSecret, range, Receiver, waitFor } from './helpers/mirror.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** 34 triggers of ~300 KB: ~10 MB of schema, each read after DDL parses all of it. */
const TRIGGERS = 34;
const STEPS = 30_000;
const ATTACK_MS = 8000;
/** The victim's events may arrive this much later than in the baseline (before: 1–4 s late, stuck behind the parses). */
const MARGIN_MS = 500;

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
  await sleep(200); // the thread reports its counts every 10 ms: a page's read may be counted after its events arrived
  const afterAttack = await reads(p);
  await victimLags(1000);
  await sleep(200);
  const end = await reads(p);
  process.stderr.write(`pages read: victim alone ${JSON.stringify(alone)}; after the attack ${JSON.stringify(afterAttack)}; at the end ${JSON.stringify(end)}\n`);
  assert.equal(alone.executor, 0, 'the victim alone: no page left the thread');
  assert.ok(alone.thread > 0);
  assert.ok(afterAttack.executor > 0, 'the tenant\'s pages were read by executors');
  assert.equal(end.executor, afterAttack.executor, 'the victim\'s pages stayed in the thread while the tenant\'s left it');
  assert.ok(end.thread > afterAttack.thread);
});
