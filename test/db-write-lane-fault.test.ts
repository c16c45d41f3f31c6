// A database's write lane runs as a loop nobody awaits (write-lanes.ts, `flush`). A throw inside it (here the pool's
// `floor` callback, the mirror ledger's retention floor, failing once: a bug there) left the lane busy for good: that
// write and every later one to the database waited for ever. On the executor pool itself, with real executor processes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ExecutorPool } from '../src/db/executor/pool.ts';
import { ApiError } from '../src/shared/errors.ts';
import { tempDir } from './helpers/product.ts';

test('a write lane whose callback throws answers its writes 500 and serves the next ones', async () => {
  const dir = tempDir();
  const limits = { sync: 'normal' as const, maxValueBytes: 1 << 20, maxSizeBytes: 1 << 30, maxResultBytes: 1 << 20, maxOpen: 16, idleCloseMs: 0 };
  const errors: unknown[] = [];
  let floorFails = 0;
  const pool = new ExecutorPool({
    processes: 1, limits, timeoutMs: 5000, beforeCreate: () => () => {}, onCommit: () => {}, onRestart: () => {},
    floor: () => {
      if (floorFails-- > 0) throw new Error('the floor failed (the test made it)');
      return null;
    },
    onError: (e) => void errors.push(e),
  });
  const path = join(dir, 'main.sqlite');
  const scope = { org: 'acme', repo: 'web', database: 'main' };
  const body = (o: unknown) => Buffer.from(JSON.stringify(o));
  const within = <T>(p: Promise<T>) => Promise.race([p, sleep(5000).then(() => 'no answer in 5 s' as const)]);
  try {
    assert.equal((await pool.write(scope, path, 'execute', body({ sql: 'CREATE TABLE t(v)' }))).status, 200);
    floorFails = 1;
    const failed = await within(pool.write(scope, path, 'execute', body({ sql: 'INSERT INTO t VALUES (1)' })).then(() => 'answered 200', (e: unknown) => e));
    assert.ok(failed instanceof ApiError, String(failed));
    assert.equal(failed.code, 'internal');
    assert.equal(failed.status, 500);
    assert.deepEqual(failed.details, { committed: null });
    assert.match(String((errors[0] as Error | undefined)?.message), /the floor failed/);
    const next = await within(pool.write(scope, path, 'execute', body({ sql: 'INSERT INTO t VALUES (2)' })));
    assert.notEqual(next, 'no answer in 5 s', 'the lane stayed busy: the next write to the database was never run');
    assert.equal((next as { status: number }).status, 200);
    const rows = JSON.parse((await pool.read({ op: 'query', path }, body({ sql: 'SELECT v FROM t' }))).body.toString()) as { results: { rows: unknown[][] }[] };
    assert.deepEqual(rows.results[0]!.rows, [[2]]);
  } finally {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
