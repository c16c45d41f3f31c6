// Mirror delivery on a cluster node (src/mirror/delivery/gate.ts): nothing leaves without a grant, nothing past it or
// past the lease; a held lane reads nothing; cursors from another node raise a lane and its saved row, never lower it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { DeliveryGate, sharedNow } from '../src/mirror/delivery/gate.ts';
import { DeliveryStore } from '../src/mirror/delivery/store.ts';
import { createLogger } from '../src/shared/log.ts';
import { MemoryFeed, newSecret, range, Receiver, scopeOf, startEngine, tempDir, waitFor } from './helpers/mirror.ts';
import { join } from 'node:path';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A delivery engine to one receiver, gated as a cluster node gates it. */
async function gatedEngine() {
  const dataDir = tempDir();
  const feed = new MemoryFeed();
  const receiver = await new Receiver().start();
  const gate = new DeliveryGate();
  const w = startEngine({
    feed, dataDir, logger: createLogger('silent'), mirrors: [{ name: 'hook', url: receiver.url, secret: newSecret() }],
    timeoutMs: 1000, maxBackoffMs: 50, baseBackoffMs: 5, stallAfterMs: 60_000, concurrency: 4, gate: (scope, v) => gate.allows(scope, v),
  });
  return { dataDir, feed, receiver, gate, w };
}
const change = (c: Partial<Parameters<DeliveryGate['apply']>[0]>) => ({ grants: [], revoked: [], revokeAll: false, leaseUntil: null, ...c });

test('gated delivery: only granted versions within the lease leave; a grant or a renewed lease resumes the lane', async (t) => {
  const { dataDir, feed, receiver, gate, w } = await gatedEngine();
  t.after(async () => {
    await w.close();
    await receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const scope = scopeOf('g');
  const apply = (c: Parameters<typeof change>[0]) => {
    for (const o of gate.apply(change(c))) w.notice(o.scope, o.upTo);
  };
  for (let i = 0; i < 6; i++) feed.commit(scope);
  await sleep(100);
  assert.equal(receiver.all.length, 0, 'no grant: nothing sent');
  assert.equal(feed.reads, 0, 'a held lane does not even read the change log');

  apply({ grants: [[scope.org, scope.repo, scope.database, 3]] });
  await sleep(100);
  assert.equal(receiver.all.length, 0, 'a grant without a lease: nothing sent');
  apply({ leaseUntil: sharedNow() + 60_000 });
  await waitFor(() => receiver.acked.length === 3, 5000, 'versions 1..3');
  await sleep(100);
  assert.deepEqual(receiver.versions('g'), range(1, 3), 'nothing past the grant');

  apply({ grants: [[scope.org, scope.repo, scope.database, 5]] });
  await waitFor(() => receiver.acked.length === 5, 5000, 'versions 4..5');
  apply({ leaseUntil: sharedNow() - 1, grants: [[scope.org, scope.repo, scope.database, 6]] });
  await sleep(100);
  assert.deepEqual(receiver.versions('g'), range(1, 5), 'a lapsed lease: nothing more');
  apply({ leaseUntil: sharedNow() + 60_000 });
  await waitFor(() => receiver.acked.length === 6, 5000, 'version 6 once the lease is back');

  apply({ revoked: [[scope.org, scope.repo, scope.database]] });
  feed.commit(scope);
  await sleep(100);
  assert.deepEqual(receiver.versions('g'), range(1, 6), 'revoked: nothing more');
});

test('cursors from another node raise a lane and its saved row, never lower them', async (t) => {
  const { dataDir, feed, receiver, gate, w } = await gatedEngine();
  t.after(async () => {
    await receiver.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const scope = scopeOf('c');
  for (let i = 0; i < 10; i++) feed.commit(scope);
  w.seed(scope, 'hook', 7);
  w.seed(scope, 'hook', 4);
  w.seed(scope, 'unknown-mirror', 9);
  await waitFor(() => w.acknowledgedFloor(scope) === 7, 5000, 'the cursor taken (a drain running at the time takes it when it ends)');
  for (const o of gate.apply(change({ grants: [[scope.org, scope.repo, scope.database, 10]], leaseUntil: sharedNow() + 60_000 }))) w.notice(o.scope, o.upTo);
  await waitFor(() => receiver.acked.length === 3, 5000, 'versions 8..10');
  assert.deepEqual(receiver.versions('c'), [8, 9, 10], 'the new primary resumes after the shipped cursor');
  // The receiver has answered; the engine takes the answer a moment later (closed before, it would send 10 again).
  await waitFor(() => w.acknowledgedFloor(scope) === 10, 5000, 'the last answer taken');
  await w.close();
  const store = new DeliveryStore(join(dataDir, 'mirrors.sqlite'));
  assert.deepEqual(store.all().map((r) => [r.mirror, r.database, r.deliveredVersion]), [['hook', 'c', 10]]);
  store.close();
});
