// Which repo's job takes a process as it frees (src/db/executor/scheduler.ts): a repo running nothing goes first, and
// may take the process kept draining for another repo's write. The scheduler itself, with real executor processes,
// its jobs enqueued in one turn each so their order is exact: reads of an empty database that cost some ms of CPU.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Scheduler } from '../src/db/executor/scheduler.ts';
import { tempDir } from './helpers/product.ts';

const errors: unknown[] = [];
const scheduler = new Scheduler({
  processes: 2, maxProcesses: 6, perTenant: 2, runawayPasses: 2, queueTimeoutMs: 60_000, queueTargetMs: 60_000, maxQueuedPerTenant: 100, maxQueued: 1000,
  limits: { sync: 'full', maxValueBytes: 1 << 20, maxSizeBytes: 1 << 30, maxResultBytes: 1 << 24, maxOpen: 16, idleCloseMs: 0 },
  onRestart: () => {}, onError: (e) => void errors.push(e),
});
after(() => scheduler.close());

const path = join(tempDir(), 'none.sqlite'); // never made: each job reads an empty database in memory
const work = (rows: number) => `SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT ${rows}) SELECT x FROM c)`;
/** A job of `tenant` costing about `rows` / 10,000 ms; resolves with when it was answered. `write` only as the policy sees it. */
function job(tenant: string, write: boolean, rows: number): Promise<number> {
  const body = Buffer.from(JSON.stringify({ sql: work(rows), asEmpty: true }));
  return scheduler.run(tenant, write, { op: 'query', path }, body, 60_000).then((frame) => {
    assert.equal((frame.header as { s: number }).s, 200, frame.body.toString());
    return performance.now();
  });
}
const nextTurn = () => new Promise((r) => setImmediate(() => setImmediate(r)));

test('as a process frees, a repo running nothing takes it before another repo\'s older queued writes (it waited for every one of them)', async () => {
  for (let i = 0; i < 8; i++) await Promise.all([job('warm', false, 50_000), job('warm', false, 50_000)]); // service times reach these jobs' (reads no longer pipeline)
  // Repo x runs on one process, repo hog on the other; hog is below its share, so its queued writes go first by age.
  const x = job('x', true, 60_000);
  const running = job('hog', true, 150_000);
  await nextTurn();
  const queued = [1, 2, 3, 4].map(() => job('hog', true, 150_000));
  await nextTurn();
  const read = job('quiet', false, 1_000); // younger than every queued write
  const [readAt, xAt, runningAt, ...queuedAt] = await Promise.all([read, x, running, ...queued]);
  assert.ok(readAt > xAt, 'premise: the read waited for a process');
  // It ran on the first process to free, before any of hog's queued writes (it ran after three or four of them).
  const ahead = queuedAt.filter((at) => at < readAt).length;
  assert.equal(ahead, 0, `${ahead} of hog's 4 queued writes were answered before the read (its running one ${(runningAt - readAt).toFixed(1)} ms after it)`);
  assert.deepEqual(errors, []);
});
