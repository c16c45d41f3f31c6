// The order in which one repo's waiting reads are served (src/db/executor/tenant.ts): oldest first while the queue
// is prompt, newest first while the repo is overloaded or once the oldest has waited past DB_QUEUE_TARGET_MS (adaptive
// LIFO; the scheduler decides which, see Placement.lifoBefore), so that under overload the reads that are served
// are served promptly and the stale ones are the ones refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Tenant, type Job } from '../src/db/executor/tenant.ts';
import { maxWait } from '../src/db/executor/queue-limits.ts';

function job(t: Tenant, enqueuedAt: number, write = false): Job {
  return { tenant: t, write, header: { at: enqueuedAt }, body: undefined, budgetMs: 1000, enqueuedAt, resolve: () => {}, reject: () => {}, settled: false, hedges: 0, queued: false, started: false };
}

test('reads go oldest first while the oldest is within the target', () => {
  const t = new Tenant('acme/web');
  const [a, b, c] = [job(t, 100), job(t, 110), job(t, 120)];
  for (const j of [a, b, c]) t.push(j, false);
  const served = [];
  for (let r = t.peekRead(90); r; r = t.peekRead(90)) served.push(t.take(r).enqueuedAt);
  assert.deepEqual(served, [100, 110, 120]);
  assert.equal(t.queued, 0);
});

test('once the oldest read has waited past the target, the newest goes first; the old ones stay for expiry', () => {
  const t = new Tenant('acme/web');
  for (const at of [100, 110, 120, 130]) t.push(job(t, at), false);
  // The target's cutoff is 105: the oldest (100) is stale, so the newest is served, then the next newest.
  assert.equal(t.take(t.peekRead(105)!).enqueuedAt, 130);
  assert.equal(t.take(t.peekRead(105)!).enqueuedAt, 120);
  // What is left is refused by expiry from the old end, as before.
  assert.deepEqual(t.expire(105).map((j) => j.enqueuedAt), [100]);
  // With the oldest now within the target, the order is oldest first again.
  assert.equal(t.take(t.peekRead(105)!).enqueuedAt, 110);
  assert.equal(t.queued, 0);
});

test('while the repo is overloaded (the scheduler passes Infinity), reads go newest first whatever their age', () => {
  const t = new Tenant('acme/web');
  for (const at of [100, 110, 120]) t.push(job(t, at), false);
  assert.deepEqual([1, 2, 3].map(() => t.take(t.peekRead(Infinity)!).enqueuedAt), [120, 110, 100]);
});

test('a read put back at the head (hedged, or to run once more) is served next even while reads go newest first', () => {
  const t = new Tenant('acme/web');
  for (const at of [100, 110]) t.push(job(t, at), false);
  const again = job(t, 50);
  t.push(again, true);
  assert.equal(t.peekRead(105), again);
  t.take(again);
  assert.equal(t.take(t.peekRead(105)!).enqueuedAt, 110, 'then newest first, the oldest being stale');
});

test('writes keep their order whatever the reads do', () => {
  const t = new Tenant('acme/web');
  for (const at of [100, 110, 120]) t.push(job(t, at, true), false);
  t.push(job(t, 90), false);
  const order = [];
  for (let w = t.peekWrite(); w; w = t.peekWrite()) order.push(t.take(w).enqueuedAt);
  assert.deepEqual(order, [100, 110, 120]);
  assert.equal(t.peekRead(200)!.enqueuedAt, 90);
});

test('a job that comes to an empty queue is a burst, not a standing queue: it gets the whole queue timeout', () => {
  // A repo whose last job still runs is kept (its queue last emptied when that job started, long ago): the queue was
  // empty all that time, so the next job must not be held to the standing queue's target.
  const t = new Tenant('acme/web');
  t.lastEmptyAt = performance.now() - 10_000;
  const now = performance.now();
  t.push(job(t, now, true), false);
  assert.equal(maxWait(t.lastEmptyAt, performance.now(), 1000, 50), 1000);
  // While it waits, one more does not refresh it: a queue that stays non-empty does become standing.
  const since = t.lastEmptyAt;
  t.push(job(t, now + 1), false);
  assert.equal(t.lastEmptyAt, since);
});
