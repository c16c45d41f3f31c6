// A read sent down a process's pipe behind a statement that turns slow is sent again elsewhere (hedged); when that copy
// too lands behind a statement that turns slow, it is sent again, so the read is answered or refused at
// DB_QUEUE_TIMEOUT_MS, never held until both statements end. Hedged once only, it waited for them (CI: a runaway's
// copy held behind another runaway was refused 503 after 2.5 s, "waited 2538 ms", past its 1-s queue limit).
// The scheduler itself, with real executor processes: two and no more (no spare takes the copy), jobs timed exactly.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { Scheduler } from '../src/db/executor/scheduler.ts';
import { QueueError } from '../src/db/executor/queue-limits.ts';
import { tempDir } from './helpers/product.ts';
import { pause } from './helpers/runaway.ts';

const QUEUE_TIMEOUT_MS = 400;
const errors: unknown[] = [];
const scheduler = new Scheduler({
  processes: 2, maxProcesses: 2, perTenant: 2, runawayPasses: 0, queueTimeoutMs: QUEUE_TIMEOUT_MS, queueTargetMs: QUEUE_TIMEOUT_MS, maxQueuedPerTenant: 100, maxQueued: 1000,
  limits: { sync: 'full', maxValueBytes: 1 << 20, maxSizeBytes: 1 << 30, maxResultBytes: 1 << 24, maxOpen: 16, idleCloseMs: 0 },
  onRestart: () => {}, onError: (e) => void errors.push(e),
});
after(() => scheduler.close());

const path = join(tempDir(), 'none.sqlite'); // never made: each job reads an empty database in memory
const work = (rows: number) => `SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT ${rows}) SELECT x FROM c)`;
/** A read of `tenant` costing about `rows` / 10,000 ms of CPU; resolves with how it ended and when. */
function read(tenant: string, rows: number): Promise<{ ok: boolean; refused: boolean; at: number }> {
  const body = Buffer.from(JSON.stringify({ sql: work(rows), asEmpty: true }));
  return scheduler.run(tenant, false, { op: 'query', path }, body, 60_000).then(
    (frame) => ({ ok: (frame.header as { s: number }).s === 200, refused: false, at: performance.now() }),
    (e: unknown) => ({ ok: false, refused: e instanceof QueueError, at: performance.now() }),
  );
}

test('a read whose hedged copy lands behind another statement that turns slow is sent again: refused at the queue limit, not held until both end', async () => {
  // Quick reads first: each process's service time is then well under 1 ms, so it takes reads a few deep (pipelined).
  for (let i = 0; i < 50; i++) await Promise.all([read('warm', 100), read('warm', 100)]);
  // In one turn: x's 2-s statement to the first process, w's quick one to the second, and y's read behind x's (the
  // two tie at one each). About 13 ms later z's 2-s statement takes the second: when the first turns slow (past
  // 20 ms) the read's copy goes to the second, still free, and down its pipe behind z's. Timing decides the
  // premise on a loaded machine, so three offsets are tried, and every one must hold.
  for (const offset of [10, 13, 16]) {
    const t0 = performance.now();
    const x = read('x', 20_000_000);
    const w = read('w', 100);
    const y = read('y', 100);
    await pause(offset);
    const z = read('z', 20_000_000);
    const r = await y;
    const [xr, wr, zr] = await Promise.all([x, w, z]);
    assert.ok(xr.ok && wr.ok && zr.ok, 'the others ran');
    assert.ok(r.ok || r.refused, 'the read was answered, or refused before it started');
    // Held behind both, it was answered when x's statement ended, about 2 s in.
    assert.ok(r.at - t0 < QUEUE_TIMEOUT_MS + 1000, `the read ended ${(r.at - t0).toFixed(0)} ms in, ${(Math.min(xr.at, zr.at) - r.at).toFixed(0)} ms before the first slow statement (offset ${offset} ms)`);
  }
  assert.deepEqual(errors, []);
});
