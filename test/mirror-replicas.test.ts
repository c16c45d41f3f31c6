// The reference mirror's ReplicaSet with its replica files' ops scripted: what a stopped apply or a stopped snapshot
// preparation does next (backoff, doubling, reset), without executors. The real thing: test/mirror-apply.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync, writeFileSync } from 'node:fs';
import { ReplicaSet, STOP_BACKOFF_MAX_MS, STOP_BACKOFF_MS } from '../src/mirror/reference/replicas.ts';
import type { FileOutcome } from '../src/mirror/reference/replica.ts';
import type { ChangeEvent } from '../src/db/contract.ts';
import { createLogger } from '../src/shared/log.ts';
import { ApiError } from '../src/shared/errors.ts';
import { tempDir } from './helpers/product.ts';

const scope = { org: 'acme', repo: 'web', database: 'main' };
const event = (version: number): ChangeEvent => ({
  id: `evt_${version}`, type: 'database.changed', ...scope, version, previousVersion: version - 1, committedAt: new Date().toISOString(),
  changeset: 'AAAA', changes: { rowsAffected: 1, tables: ['t'] },
} as unknown as ChangeEvent);

function harness() {
  const root = tempDir();
  let clock = 0;
  /** The primary's version: what a snapshot holds. */
  let primary = 0;
  const calls = { apply: 0, fetch: 0, prepare: 0 };
  let applyAnswer: FileOutcome = { problem: 'unset' };
  let prepareStopped = false;
  const set = new ReplicaSet({
    root, logger: createLogger('silent'), holdMs: 10, now: () => clock,
    fetchSnapshot: (_scope, target) => {
      calls.fetch++;
      writeFileSync(target, 'snapshot');
      return Promise.resolve(primary);
    },
    files: {
      apply: (_path, e) => {
        calls.apply++;
        return Promise.resolve('version' in applyAnswer ? { version: e.version } : applyAnswer);
      },
      prepare: () => {
        calls.prepare++;
        return Promise.resolve(prepareStopped ? { problem: 'preparing the snapshot ran past 300 ms and was stopped', stopped: true as const } : { version: primary });
      },
      version: () => Promise.resolve({ version: primary }),
      release: () => Promise.resolve(),
    },
  });
  return {
    set, calls,
    at: (ms: number) => void (clock = ms),
    primaryAt: (v: number) => void (primary = v),
    applies: (answer: FileOutcome) => void (applyAnswer = answer),
    preparesStopped: (stopped: boolean) => void (prepareStopped = stopped),
    async close() {
      await set.close();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

const stopped: FileOutcome = { problem: 'applying the event ran past 300 ms and was stopped', stopped: true };

test('a stopped apply heals from a snapshot, then snapshots only for a while: doubling with each stop, reset by an apply that succeeds', async () => {
  const h = harness();
  try {
    h.primaryAt(1);
    assert.equal(await h.set.receive(event(1)), 'bootstrapped'); // the first event
    h.applies({ version: 0 });
    h.primaryAt(2);
    assert.equal(await h.set.receive(event(2)), 'applied');
    assert.equal(h.calls.apply, 1);

    // Stopped: healed from a snapshot at once, then no apply for STOP_BACKOFF_MS.
    h.applies(stopped);
    h.primaryAt(3);
    assert.equal(await h.set.receive(event(3)), 'bootstrapped');
    assert.equal(h.calls.apply, 2);
    assert.equal(h.set.version(scope), 3);
    h.primaryAt(4);
    h.at(STOP_BACKOFF_MS - 1);
    assert.equal(await h.set.receive(event(4)), 'bootstrapped');
    assert.equal(h.calls.apply, 2, 'no apply while the database heals from snapshots');

    // Past it: applied again; stopped again, the backoff doubles.
    h.at(STOP_BACKOFF_MS);
    h.primaryAt(5);
    assert.equal(await h.set.receive(event(5)), 'bootstrapped');
    assert.equal(h.calls.apply, 3);
    h.primaryAt(6);
    h.at(STOP_BACKOFF_MS + 2 * STOP_BACKOFF_MS - 1);
    assert.equal(await h.set.receive(event(6)), 'bootstrapped');
    assert.equal(h.calls.apply, 3, 'the second stop doubled the backoff');

    // An apply that succeeds resets it: the next stop backs off STOP_BACKOFF_MS again.
    let now = 3 * STOP_BACKOFF_MS;
    h.at(now);
    h.applies({ version: 0 });
    assert.equal(await h.set.receive(event(7)), 'applied');
    h.applies(stopped);
    h.primaryAt(8);
    assert.equal(await h.set.receive(event(8)), 'bootstrapped');
    h.applies({ version: 0 });
    h.at(now + STOP_BACKOFF_MS);
    assert.equal(await h.set.receive(event(9)), 'applied');
    assert.equal(h.set.version(scope), 9);

    // Never longer than STOP_BACKOFF_MAX_MS.
    h.applies(stopped);
    for (let v = 10; v < 30; v++) {
      h.primaryAt(v);
      now += STOP_BACKOFF_MAX_MS;
      h.at(now);
      assert.equal(await h.set.receive(event(v)), 'bootstrapped');
    }
    assert.equal(h.calls.apply, 6 + 20, 'after STOP_BACKOFF_MAX_MS an apply is tried again, however many stops came before');
  } finally {
    await h.close();
  }
});

test('a stopped snapshot preparation: 503 with Retry-After, and no new download before its backoff ends', async () => {
  const h = harness();
  try {
    h.primaryAt(1);
    assert.equal(await h.set.receive(event(1)), 'bootstrapped');
    h.preparesStopped(true);
    h.primaryAt(3);
    const refused = await h.set.receive(event(3)).catch((e: unknown) => e);
    assert.ok(refused instanceof ApiError && refused.code === 'unavailable', String(refused));
    assert.equal(refused.headers?.['retry-after'], String(STOP_BACKOFF_MS / 1000));
    assert.equal(h.calls.fetch, 2);
    h.at(STOP_BACKOFF_MS - 1000);
    const again = await h.set.receive(event(3)).catch((e: unknown) => e);
    assert.ok(again instanceof ApiError && again.code === 'unavailable');
    assert.equal(again.headers?.['retry-after'], '1');
    assert.equal(h.calls.fetch, 2, 'no download during the backoff');
    assert.equal(h.set.version(scope), 1, 'the replica still answers at its version');
    h.preparesStopped(false);
    h.at(STOP_BACKOFF_MS);
    assert.equal(await h.set.receive(event(3)), 'bootstrapped');
    assert.equal(h.set.version(scope), 3);
  } finally {
    await h.close();
  }
});

test('a restore or an import at or below the replica\'s version re-bootstraps it (the primary\'s versions restarted), once per event; any other is a duplicate', async () => {
  const h = harness();
  try {
    h.primaryAt(6);
    assert.equal(await h.set.receive(event(6)), 'bootstrapped');
    assert.equal(await h.set.receive(event(4)), 'duplicate');
    assert.equal(h.calls.fetch, 1);
    // A backup at version 3 was restored into the primary: its restore event is version 4, below the replica's 6.
    h.primaryAt(4);
    const restored = { ...event(4), type: 'database.restored', operation: 'restore', restoredVersion: 3, changeset: null } as ChangeEvent;
    assert.equal(await h.set.receive(restored), 'bootstrapped');
    assert.equal(h.calls.fetch, 2);
    assert.equal(h.set.version(scope), 4);
    h.primaryAt(5);
    assert.equal(await h.set.receive({ ...event(5), type: 'database.imported', operation: 'import', changeset: null } as ChangeEvent), 'bootstrapped');
    const imported = { ...event(5), type: 'database.imported', operation: 'import', changeset: null } as ChangeEvent;
    assert.equal(await h.set.receive(imported), 'duplicate', 'the same event delivered again costs no snapshot');
    assert.equal(h.calls.fetch, 3);
    // Another restore numbered the same (a backup restored again): its own id, so versions restarted once more.
    assert.equal(await h.set.receive({ ...restored, id: 'evt_other_restore' }), 'bootstrapped');
    assert.equal(h.calls.fetch, 4);
    assert.equal(h.set.version(scope), 5);
  } finally {
    await h.close();
  }
});
