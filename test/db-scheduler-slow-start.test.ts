// Executor processes that start slowly, as on a loaded machine (0.5-1.5 s at a load of 10 on two cores): the processes
// spawned while runaways run are held stopped (SIGSTOP) until released. A repo's work beyond its share, on its runaway
// pass, goes to a started process only: it is served by one that is there, or once one is; both were 503s after 500 ms
// (its queue judged standing), the repo's third database refused while two runaways ran, which runaway passes exist to
// prevent (SPEC 4.8, src/db/DESIGN.md). So was its read pipelined behind another repo's runaway: it filled the share.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { executorPids, holdNewExecutors } from './helpers/processes.ts';
import { pause, RUNAWAY } from './helpers/runaway.ts';
import { waitFor } from './helpers/mirror.ts';

async function product(env: Record<string, string>, databases: string[]): Promise<Product> {
  const p = await startProduct({ DB_QUERY_TIMEOUT_MS: '3000', ...env });
  for (const database of databases) assert.equal((await p.db('web', 'execute', { database, sql: 'CREATE TABLE t(x)' })).status, 200);
  assert.equal((await p.db('site', 'execute', { sql: 'CREATE TABLE t(x)' }, { org: 'other' })).status, 200);
  // An extra process spawned for a slow first write (an fsync past 20 ms) retires after 5 s idle: DB_EXECUTORS are left.
  await waitFor(() => executorPids().length === p.config.db.executors, 15_000, `${p.config.db.executors} executors`);
  return p;
}

test('a repo\'s two runaways, an idle process, its replacements not started: the repo\'s third database is served on it (it was kept idle for other repos, none waiting, and the requests refused)', async () => {
  // Three processes, two per repo: the runaways take two, the third stays idle and started.
  const p = await product({ DB_EXECUTORS: '3', DB_EXECUTORS_PER_REPO: '2' }, ['d0', 'd1', 'd2']);
  const hold = holdNewExecutors();
  const runaways = ['d0', 'd1'].map((database) => p.db('web', 'query', { database, sql: RUNAWAY }));
  try {
    await pause(300); // past RUNAWAY_MS: the oldest holds the repo's runaway pass
    const t0 = performance.now();
    const [w, r] = await Promise.all([
      p.db('web', 'execute', { database: 'd2', sql: 'INSERT INTO t VALUES (1)' }),
      p.db('web', 'query', { database: 'd2', sql: 'SELECT count(*) FROM t' }),
    ]);
    const ms = performance.now() - t0;
    assert.equal(w.status, 200, w.text);
    assert.equal(r.status, 200, r.text);
    assert.ok(ms < 1500, `answered after ${ms.toFixed(0)} ms`);
    hold.release();
    for (const x of await Promise.all(runaways)) assert.equal(x.json?.error?.code, 'query_timeout', x.text);
  } finally {
    hold.release();
    await Promise.allSettled(runaways);
    await p.close();
  }
});

test('a repo\'s two runaways took every started process: its third database waits for their replacements to start and is served (it was refused after 500 ms)', async () => {
  const p = await product({ DB_QUEUE_TIMEOUT_MS: '5000' }, ['d0', 'd1', 'd2']); // DB_EXECUTORS 2, DB_EXECUTORS_PER_REPO 2
  const hold = holdNewExecutors();
  const runaways = ['d0', 'd1'].map((database) => p.db('web', 'query', { database, sql: RUNAWAY }));
  try {
    await pause(300); // past RUNAWAY_MS: the oldest holds the repo's runaway pass
    const t0 = performance.now();
    const served = Promise.all([
      p.db('web', 'execute', { database: 'd2', sql: 'INSERT INTO t VALUES (1)' }),
      p.db('web', 'query', { database: 'd2', sql: 'SELECT count(*) FROM t' }),
    ]);
    await pause(1200); // the replacements start this much later: as on a machine at a load of 10 or more
    hold.release();
    const [w, r] = await served;
    assert.equal(w.status, 200, `${w.text} after ${(performance.now() - t0).toFixed(0)} ms`);
    assert.equal(r.status, 200, r.text);
    for (const x of await Promise.all(runaways)) assert.equal(x.json?.error?.code, 'query_timeout', x.text);
  } finally {
    hold.release();
    await Promise.allSettled(runaways);
    await p.close();
  }
});

test('a repo\'s read pipelined behind another repo\'s runaway, beside two runaways of its own: its hedge is served, not refused (the read held a place in its share where it only waited)', async () => {
  // Its queue limit under the runaways' 3000 ms: a hedge that could not start is refused before they end and free their
  // processes. Not the default 1000 ms: released 300 ms after the read, a process took over 700 ms to start at a load of 10.
  const p = await product({ DB_EXECUTORS: '4', DB_EXECUTORS_PER_REPO: '2', DB_QUEUE_TIMEOUT_MS: '2500' }, ['d0', 'd1', 'd2']);
  for (const database of ['d0', 'd1']) assert.equal((await p.db('api', 'execute', { database, sql: 'CREATE TABLE t(x)' })).status, 200);
  // Quick reads first, so a process takes reads about 1 ms deep: the read goes down the pipe behind the runaway sent before it.
  for (let i = 0; i < 50; i++) await Promise.all([p.db('web', 'query', { database: 'd2', sql: 'SELECT 1' }), p.db('api', 'query', { database: 'd0', sql: 'SELECT 1' })]);
  const hold = holdNewExecutors();
  // web's two and api's first take three processes, each repo's oldest on its runaway pass; the fourth is idle.
  const runaways = [['web', 'd0'], ['web', 'd1'], ['api', 'd0']].map(([repo, database]) => p.db(repo!, 'query', { database, sql: RUNAWAY }));
  try {
    await pause(300);
    runaways.push(p.db('api', 'query', { database: 'd1', sql: RUNAWAY })); // on the fourth, with no pass (api has one)
    await pause(5);
    const read = p.db('web', 'query', { database: 'd2', sql: 'SELECT count(*) FROM t' }); // down the same pipe
    await pause(300);
    hold.release(); // processes start: the read's hedge may run on one
    const r = await read;
    assert.equal(r.status, 200, r.text);
  } finally {
    hold.release();
    await Promise.allSettled(runaways);
    await p.close();
  }
});
