// Mirror delivery against an in-memory change feed and real HTTP receivers: order, retries, failures, restarts, stall.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { Webhook } from 'standardwebhooks';
import type { DeliveryEngine } from '../src/mirror/delivery/engine.ts';
import { backoffDelay } from '../src/mirror/delivery/backoff.ts';
import { CpuPressure, type CpuSample } from '../src/mirror/delivery/cpu-pressure.ts';
import { metrics } from '../src/shared/admin.ts';
import { createLogger } from '../src/shared/log.ts';
import { MemoryFeed, tempDir, newSecret, range, Receiver, scopeOf, startEngine, waitFor, type EngineOptions } from './helpers/mirror.ts';

const logger = createLogger('silent');

function worker(feed: MemoryFeed, mirrors: EngineOptions['mirrors'], dataDir: string, extra: Partial<EngineOptions> = {}): DeliveryEngine {
  return startEngine({ feed, mirrors, dataDir, logger, timeoutMs: 1000, maxBackoffMs: 50, baseBackoffMs: 5, stallAfterMs: 60_000, concurrency: 4, ...extra });
}

async function setup(t: TestContext, extra: Partial<EngineOptions> = {}) {
  const dataDir = tempDir();
  const feed = new MemoryFeed();
  const secret = newSecret();
  const receiver = await new Receiver().start();
  const w = worker(feed, [{ name: 'replica', url: receiver.url, secret }], dataDir, extra);
  t.after(async () => {
    await w.close();
    await receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  return { dataDir, feed, secret, receiver, w };
}

test('backoff grows exponentially, is capped, and jitters within [d/2, d]', () => {
  const p = { baseMs: 100, maxMs: 1000 };
  assert.equal(backoffDelay(p, 1, () => 0), 50);
  assert.equal(backoffDelay(p, 1, () => 1), 100);
  assert.equal(backoffDelay(p, 3, () => 1), 400);
  assert.equal(backoffDelay(p, 30, () => 1), 1000);
  assert.equal(backoffDelay(p, 30, () => 0), 500);
});

test('each commit is delivered once, signed (standardwebhooks verifies), in version order', async (t) => {
  const { feed, secret, receiver, w } = await setup(t);
  const sent = range(1, 20).map(() => feed.commit(scopeOf()));
  await waitFor(() => receiver.acked.length === 20, 5000, '20 deliveries');
  assert.deepEqual(receiver.versions(), range(1, 20));
  const wh = new Webhook(secret);
  for (const [i, r] of receiver.acked.entries()) {
    assert.equal(r.headers['webhook-id'], sent[i]!.id);
    assert.match(String(r.headers['webhook-timestamp']), /^\d+$/);
    assert.match(String(r.headers['webhook-signature']), /^v1,/);
    assert.deepEqual(wh.verify(r.body, r.headers as Record<string, string>), sent[i]);
  }
  assert.throws(() => new Webhook(newSecret()).verify(receiver.acked[0]!.body, receiver.acked[0]!.headers as Record<string, string>));
  // The receiver counts an ack when it answers; the engine takes it a moment later (CI once read 19 in between).
  await waitFor(() => w.states(scopeOf(), 20)[0]!.deliveredVersion === 20, 3000, 'the last acknowledgement taken');
  assert.deepEqual(w.states(scopeOf(), 20), [{ name: 'replica', deliveredVersion: 20, pendingEvents: 0, lastError: null, stalled: false }]);
  assert.equal(w.acknowledgedFloor(scopeOf()), 20);
});

test('mirror down (connection refused, then 503) while writes go on: nothing lost, order kept', async (t) => {
  const { feed, receiver, w } = await setup(t);
  const port = receiver.port;
  await receiver.stop();
  for (let i = 0; i < 10; i++) feed.commit(scopeOf());
  await waitFor(() => (w.states(scopeOf(), 10)[0]!.lastError ?? '').includes('ECONNREFUSED'), 3000, 'refused error');
  assert.equal(w.acknowledgedFloor(scopeOf()), 0);
  await receiver.start(port);
  receiver.behaviour = (_req, res) => void res.writeHead(503).end('down for maintenance');
  for (let i = 0; i < 5; i++) feed.commit(scopeOf());
  await waitFor(() => receiver.all.length >= 3, 3000, 'retries');
  assert.match(w.states(scopeOf(), 15)[0]!.lastError!, /^HTTP 503: down for maintenance/);
  receiver.behaviour = (_req, res) => void res.writeHead(200).end();
  await waitFor(() => receiver.acked.length === 15, 5000, 'all delivered');
  assert.deepEqual(receiver.versions(), range(1, 15));
  assert.equal(w.states(scopeOf(), 15)[0]!.lastError, null);
});

test('3xx is a failure and is not followed; 4xx is retried', async (t) => {
  const { feed, receiver, w } = await setup(t);
  let redirects = 0;
  receiver.behaviour = (req, res) => {
    if (req.url === '/elsewhere') return void res.writeHead(200).end();
    if (redirects++ < 2) return void res.writeHead(307, { location: '/elsewhere' }).end();
    if (redirects < 5) return void res.writeHead(400).end('bad');
    res.writeHead(200).end();
  };
  feed.commit(scopeOf());
  await waitFor(() => receiver.acked.length === 1, 3000, 'delivery');
  // The receiver answered before the engine took in its 200: wait for the engine's own record of it.
  await waitFor(() => w.states(scopeOf(), 1)[0]!.deliveredVersion === 1, 3000, 'the delivered version');
  assert.equal(receiver.all.filter((r) => r.url === '/elsewhere').length, 0);
  assert.equal(receiver.all.length, 5);
});

test('a hanging mirror times out and never slows another mirror', async (t) => {
  const dataDir = tempDir();
  const feed = new MemoryFeed();
  const slow = await new Receiver().start();
  const fast = await new Receiver().start();
  slow.behaviour = () => {}; // never answers
  const w = worker(feed, [{ name: 'slow', url: slow.url, secret: newSecret() }, { name: 'fast', url: fast.url, secret: newSecret() }], dataDir, { timeoutMs: 200, concurrency: 2 });
  t.after(async () => {
    await w.close();
    await slow.stop();
    await fast.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const started = Date.now();
  for (const db of ['a', 'b', 'c', 'd', 'e']) for (let i = 0; i < 3; i++) feed.commit(scopeOf(db));
  await waitFor(() => fast.acked.length === 15, 2000, 'fast mirror');
  assert.ok(Date.now() - started < 1000, 'the fast mirror was not held up');
  await waitFor(() => w.states(scopeOf('a'), 3).find((s) => s.name === 'slow')!.lastError === 'no reply within 200 ms', 2000, 'timeout error');
  // Only the first version of each database was tried: v2 never goes before v1 is acknowledged.
  assert.ok(slow.all.every((r) => r.event.version === 1));
  slow.behaviour = (_req, res) => void res.writeHead(200).end();
  await waitFor(() => slow.acked.filter((r) => r.event.version === 3).length === 5, 5000, 'slow mirror catches up');
  for (const db of ['a', 'b', 'c', 'd', 'e']) assert.deepEqual(slow.versions(db), range(1, 3));
});

test('connection resets and huge reply bodies are survived', async (t) => {
  const { feed, receiver, w } = await setup(t);
  let n = 0;
  receiver.behaviour = (req, res) => {
    n++;
    if (n === 1) return void req.socket.destroy();
    if (n === 2) {
      res.writeHead(500);
      const chunk = Buffer.alloc(64 * 1024, 'x');
      const pump = () => {
        while (res.write(chunk)) if (res.writableLength > 1e6) break;
      };
      res.on('drain', pump);
      pump();
      return; // an endless 500 body
    }
    res.writeHead(200);
    res.end(Buffer.alloc(8 * 1024 * 1024, 'y')); // a big acknowledgement
  };
  feed.commit(scopeOf());
  feed.commit(scopeOf());
  await waitFor(() => w.states(scopeOf(), 2)[0]!.deliveredVersion === 2, 5000, 'delivered');
  await waitFor(() => receiver.acked.length === 2, 2000, 'receiver saw both acknowledgements');
  assert.deepEqual(receiver.versions(), [1, 2]);
  const failures = await metrics.getSingleMetric('scopebase_mirror_delivery_failures_total')!.get();
  const kinds = new Set(failures.values.filter((v) => v.value > 0).map((v) => v.labels.kind));
  assert.ok(kinds.has('network') && kinds.has('server_error'), `failure kinds: ${[...kinds]}`);
});

test('many databases, out-of-order-prone mirror: each database strictly in order, none lost', async (t) => {
  const { feed, receiver } = await setup(t, { concurrency: 8 });
  receiver.behaviour = async (_req, res) => {
    await new Promise((r) => setTimeout(r, Math.random() * 5));
    res.writeHead(Math.random() < 0.2 ? 500 : 200).end();
  };
  const dbs = range(1, 20).map((i) => `db${i}`);
  for (let round = 0; round < 10; round++) for (const db of dbs) feed.commit(scopeOf(db));
  await waitFor(() => receiver.acked.length >= 200 && dbs.every((db) => receiver.versions(db).includes(10)), 10_000, 'everything');
  for (const db of dbs) {
    const attempted = receiver.versions(db, receiver.all);
    for (let i = 1; i < attempted.length; i++) assert.ok(attempted[i]! >= attempted[i - 1]!, `${db} attempted ${attempted}`);
    assert.deepEqual([...new Set(receiver.versions(db))], range(1, 10));
  }
});

test('restart: pending events survive, acknowledged ones are not re-sent, missed hints are found by the scan', async (t) => {
  const dataDir = tempDir();
  const feed = new MemoryFeed();
  const receiver = await new Receiver().start();
  const mirrors = [{ name: 'replica', url: receiver.url, secret: newSecret() }];
  t.after(async () => {
    await receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const first = worker(feed, mirrors, dataDir);
  for (let i = 0; i < 3; i++) feed.commit(scopeOf());
  await waitFor(() => receiver.acked.length === 3, 3000, 'first three');
  receiver.behaviour = (_req, res) => void res.writeHead(503).end();
  for (let i = 0; i < 3; i++) feed.commit(scopeOf());
  await waitFor(() => receiver.all.length > 4, 3000, 'failing');
  await first.close();
  // Written while nothing ran: no hint will ever come for these.
  feed.commit(scopeOf('other'), { hint: false });
  feed.commit(scopeOf('other'), { hint: false });
  receiver.behaviour = (_req, res) => void res.writeHead(200).end();
  const second = worker(feed, mirrors, dataDir);
  t.after(() => second.close());
  assert.equal(second.acknowledgedFloor(scopeOf()), 3);
  await waitFor(() => receiver.versions().includes(6) && receiver.versions('other').includes(2), 5000, 'after restart');
  assert.deepEqual(receiver.versions(), range(1, 6));
  assert.deepEqual(receiver.versions('other'), [1, 2]);
});

test('stalled after the threshold: visible in status and metrics, still retried, cleared on success', async (t) => {
  const { feed, receiver, w } = await setup(t, { stallAfterMs: 100, maxBackoffMs: 30 });
  receiver.behaviour = (_req, res) => void res.writeHead(502).end();
  feed.commit(scopeOf());
  await waitFor(() => w.states(scopeOf(), 1)[0]!.stalled === true, 3000, 'stalled');
  const stalled = await metrics.getSingleMetric('scopebase_mirror_stalled')!.get();
  assert.equal(stalled.values.find((v) => v.labels.mirror === 'replica')?.value, 1);
  const version = await metrics.getSingleMetric('scopebase_mirror_delivered_version')!.get();
  assert.ok(version.values.some((v) => v.labels.mirror === 'replica' && v.labels.database === 'main' && v.value === 0));
  const pending = await metrics.getSingleMetric('scopebase_mirror_pending_events')!.get();
  assert.equal(pending.values.find((v) => v.labels.mirror === 'replica')?.value, 1);
  const tries = receiver.all.length;
  await waitFor(() => receiver.all.length > tries + 2, 3000, 'still retried');
  receiver.behaviour = (_req, res) => void res.writeHead(200).end();
  await waitFor(() => w.states(scopeOf(), 1)[0]!.deliveredVersion === 1, 3000, 'recovered');
  assert.equal(w.states(scopeOf(), 1)[0]!.stalled, false);
  assert.match(await metrics.metrics(), /scopebase_mirror_delivery_lag_seconds_bucket/);
});

test('events past retention are skipped to the oldest kept, and the gap is reported', async (t) => {
  const { feed, receiver, w } = await setup(t);
  receiver.behaviour = (_req, res) => void res.writeHead(500).end();
  for (let i = 0; i < 10; i++) feed.commit(scopeOf());
  await waitFor(() => receiver.all.length > 0, 3000, 'first attempt');
  feed.prune(scopeOf(), 6); // retention dropped 1..6 (only possible if retention ignored the floor)
  receiver.behaviour = (_req, res) => void res.writeHead(200).end();
  await waitFor(() => w.states(scopeOf(), 10)[0]!.deliveredVersion === 10, 3000, 'delivered');
  // Events the engine had already read before the log was cut may still go (on a slow machine, all of them); what
  // must hold is that nothing is out of order or twice, and delivery reaches the end of what is kept.
  const got = receiver.versions();
  assert.deepEqual(got, [...new Set(got)].sort((a, b) => a - b), `delivered ${got}`);
  assert.deepEqual(got.filter((v) => v >= 7), range(7, 10));
});

test('CPU pressure: delivery yields while serving is busy and the rest of the machine keeps its cores busy; resumes below lower marks', () => {
  let at: CpuSample = { busy: 0, total: 0, cores: 2, own: 0, serving: 0 };
  const pressure = new CpuPressure(() => at);
  /** One sampling period (2 cores × 100 ticks) in which the others used `others` of the machine, delivery `own`, and the main thread `serving` of one core. */
  const period = (others: number, own: number, serving: number) => {
    at = { busy: at.busy + (others + own) * 200, total: at.total + 200, cores: 2, own: at.own + own * 200, serving: at.serving + serving * 100 };
    return pressure.sample();
  };
  assert.equal(period(0.3, 0.6, 0.5), false, 'a busy machine, but busy delivering: full speed');
  assert.equal(period(0.8, 0.1, 0.1), false, 'another process keeps the machine busy, serving is light: full speed');
  assert.equal(period(0.8, 0.1, 0.9), true, 'a write flood on a full machine: yield');
  assert.equal(period(0.5, 0, 0.9), true, 'still above the resume mark');
  assert.equal(period(0.4, 0, 0.9), false, 'the others calmed down');
  assert.equal(period(0.8, 0, 0.9), true);
  assert.equal(period(0.8, 0, 0.1), false, 'the flood is over');
  assert.equal(new CpuPressure(() => null).sample(), false, 'no /proc: never yields');
});

test('while yielding, every event still goes, in order, spaced out; full speed again after', async (t) => {
  let yielding = true;
  const { feed, receiver } = await setup(t, { shouldYield: () => yielding });
  const started = performance.now();
  for (let i = 0; i < 10; i++) feed.commit(scopeOf());
  await waitFor(() => receiver.acked.length === 10, 5000, 'ten deliveries while yielding');
  assert.ok(performance.now() - started >= 40, 'spaced out: at most 200 events/s while yielding');
  yielding = false;
  for (let i = 0; i < 10; i++) feed.commit(scopeOf());
  await waitFor(() => receiver.acked.length === 20, 5000, 'the rest');
  assert.deepEqual(receiver.versions(), range(1, 20));
});

test('no mirrors: the floor is null and status lists no mirror', async (t) => {
  const dataDir = tempDir();
  const feed = new MemoryFeed();
  const none = worker(feed, [], dataDir);
  t.after(async () => {
    await none.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  assert.equal(none.acknowledgedFloor(scopeOf()), null);
  assert.deepEqual(none.states(scopeOf(), 3), []);
});

test('a database the mirror refuses alone keeps its backoff: new commits try it at most once a second, other databases\' recoveries once', async (t) => {
  const { feed, receiver } = await setup(t, { baseBackoffMs: 10_000, maxBackoffMs: 10_000 });
  receiver.behaviour = (_req, res, r) => void res.writeHead(r.event.database === 'stuck' ? 503 : 204).end();
  const attempts = () => receiver.versions('stuck', receiver.all).length;
  feed.commit(scopeOf('stuck'));
  await waitFor(() => attempts() === 1, 3000, 'the first attempt'); // its next retry: 5–10 s later
  // For 3.5 s: a commit to it every 100 ms, and another database acknowledged every 1.1 s (each after a quiet second).
  const until = performance.now() + 3500;
  let next = 0;
  while (performance.now() < until) {
    feed.commit(scopeOf('stuck'));
    if (performance.now() >= next) {
      feed.commit(scopeOf('fine'));
      next = performance.now() + 1100;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  // 1 + at most 4 probes + 1 recovery kick, and one to spare (36 without the probes' limit, 9 without the one kick).
  t.diagnostic(`${attempts()} attempts`);
  assert.ok(attempts() >= 2 && attempts() <= 7, `${attempts()} attempts`);
  assert.deepEqual(receiver.versions('fine'), range(1, receiver.versions('fine').length));
});
