// Runaway statements and the requests around them (SPEC 4.8: a statement past DB_QUERY_TIMEOUT_MS is stopped and gets
// 422 query_timeout, "while requests to other databases go on unhindered"). A repo's runaways on some databases leave
// its others served, up to DB_EXECUTORS_PER_REPO of them (its oldest holds a runaway pass, src/db/executor/runaways.ts);
// past that it waits for its share as before, and no number of them takes processes from other repos; a libSQL
// transaction's long statement counts as one. A request sent down a pipe behind a runaway is answered in time.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { getPriority } from 'node:os';
import { startProduct, type HttpResult, type Product } from './helpers/product.ts';
import { executorPids } from './helpers/processes.ts';
import { createClient } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { waitFor } from './helpers/mirror.ts';

import { pause, RUNAWAY } from './helpers/runaway.ts';

interface Ended { at: number }

describe('a repo\'s runaways on some of its databases', () => {
  let p: Product;
  const databases = Array.from({ length: 10 }, (_, i) => `d${i}`); // more than the processes there may be (8)
  before(async () => {
    // DB_EXECUTORS 2, DB_EXECUTORS_PER_REPO 2. No shedding at the door on a late event loop: it judges this test
    // process's own loop (the product runs in it), over 100 ms late on two cores at a load of 10; what is tested here
    // is which executor serves what.
    p = await startProduct({ DB_QUERY_TIMEOUT_MS: '2500', DB_MAX_LOOP_DELAY_MS: '0' });
    for (const database of databases) { const r = await p.db('web', 'execute', { database, sql: 'CREATE TABLE t(x)' }); assert.equal(r.status, 200, r.text); }
    assert.equal((await p.db('site', 'execute', { sql: 'CREATE TABLE t(x)' }, { org: 'other' })).status, 200);
  });
  after(() => p.close());

  /**
   * Writes and reads one database of `repo` for `ms`, and on until one request is served or the runaways end, and
   * asserts what is guaranteed: a database with no runaway of its own is served while they run. Without a runaway pass
   * they held the repo's share and every request to it waited and was refused (503) until they ended: none served.
   * A 503 that says nothing ran passes (any other answer fails): on a loaded host (load 5-13) a quick statement past
   * 20 ms is lowered to nice 10 like a runaway (src/db/executor/process.ts, `yieldCpu`) and may take 0.4-0.7 s; it then
   * fills the repo's share, and a request behind it is shed at its queue limit as any is. Counted, not timed.
   */
  async function assertServed(repo: string, database: string, ms: number, runaways: Ended, org = 'acme'): Promise<void> {
    let served = 0;
    let refused = 0;
    const until = performance.now() + ms;
    const giveUp = until + 10_000; // runaways never stopped fail here, not hang the run
    while (performance.now() < until || (served === 0 && runaways.at === Infinity && performance.now() < giveUp)) {
      await Promise.all([
        p.db(repo, 'execute', { database, sql: 'INSERT INTO t VALUES (1)' }, { org }),
        p.db(repo, 'query', { database, sql: 'SELECT count(*) FROM t' }, { org }),
      ].map(async (request) => {
        const r = await request;
        if (r.status === 200) served += runaways.at === Infinity ? 1 : 0;
        else if (r.status === 503 && r.json?.error?.details?.committed === false) refused++;
        else assert.fail(`${repo}/${database}: ${r.status} ${r.text}`);
      }));
      await pause(10);
    }
    assert.ok(served > 0, `${org}/${repo}/${database}: no request served while the runaways ran, ${refused} refused (503, nothing ran)`);
  }

  /** A process running a statement past 20 ms is lowered to nice 10 (src/db/executor/process.ts, `yieldCpu`). */
  const niced = (pid: number): boolean => {
    try {
      return getPriority(pid) > 0;
    } catch {
      return false; // gone
    }
  };

  /** When the first of `runaways` that ran ended (Infinity while all run): one refused (503) never ran. */
  function firstEnd(runaways: Promise<HttpResult | void>[]): Ended {
    const ended = { at: Infinity };
    const end = () => (ended.at = Math.min(ended.at, performance.now()));
    for (const r of runaways) r.then((v) => v?.status !== 503 && end(), end);
    return ended;
  }

  /** Runs `body` while `runaways` run, then waits for them however it ended: a failed test leaves none to the next. */
  async function whileRunning(runaways: Promise<HttpResult>[], body: () => Promise<void>): Promise<HttpResult[]> {
    try {
      await body();
    } finally {
      await Promise.allSettled(runaways);
    }
    return Promise.all(runaways);
  }

  test('as many runaways as executors, on two of its databases, leave writes and reads to its third served (they got 503 for as long as the runaways ran)', async () => {
    const runaways = ['d0', 'd1'].map((database) => p.db('web', 'query', { database, sql: RUNAWAY }));
    const first = firstEnd(runaways);
    const ended = await whileRunning(runaways, async () => {
      await pause(50);
      await assertServed('web', 'd2', 1500, first);
    });
    for (const r of ended) assert.equal(r.json?.error?.code, 'query_timeout', r.text);
  });

  test('two libSQL transactions each running a long statement, on two of its databases, leave writes and reads to its third served (a transaction\'s statement held no runaway pass: 503)', async () => {
    const clients = ['d0', 'd1'].map((database) => createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback }));
    const long: Promise<void>[] = [];
    try {
      for (const [i, c] of clients.entries()) {
        const tx = await c.transaction('write');
        long.push(tx.execute(RUNAWAY).then(() => assert.fail('it ends only at its limit'), (e: Error) => assert.match(e.message, /ran past 2500 ms/)).finally(() => tx.close()));
        // Its process is slow (lowered to nice 10 past 20 ms; still so 100 ms later: not a BEGIN's slow fsync): the next
        // transaction is pinned to another one (on the same one, the two would run one after the other).
        const slow = () => executorPids().filter(niced).length > i;
        await waitFor(async () => slow() && (await pause(100), slow()), 3000, 'its statement running slow');
      }
      await assertServed('web', 'd2', 1500, firstEnd(long));
    } finally {
      await Promise.allSettled(long); // a failed test leaves none to the next
      for (const c of clients) c.close();
    }
    await Promise.all(long);
  });

  test('two repos with as many runaways each: each one\'s other databases are served (a pass each, not both to one)', async () => {
    for (const database of ['d0', 'd1', 'd2']) assert.equal((await p.db('api', 'execute', { database, sql: 'CREATE TABLE t(x)' })).status, 200);
    const runaways = ['web', 'api'].flatMap((repo) => ['d0', 'd1'].map((database) => p.db(repo, 'query', { database, sql: RUNAWAY })));
    const first = firstEnd(runaways);
    const ended = await whileRunning(runaways, async () => {
      await pause(200);
      await Promise.all([assertServed('web', 'd2', 800, first), assertServed('api', 'd2', 800, first)]);
    });
    // Four at once on two processes: two wait for the passes' processes to start (0.1-1 s, more on a loaded host), and
    // one may be refused at its queue limit as any request is (CI, load ~10); a refused one never ran.
    for (const r of ended) {
      if (r.status === 503) assert.equal(r.json?.error?.details?.committed, false, r.text);
      else assert.equal(r.json?.error?.code, 'query_timeout', r.text);
    }
  });

  test('past DB_EXECUTORS_PER_REPO runaways (a third), its next request waits for its share and is refused (503, nothing ran), and another org is served all along', async () => {
    const runaways = ['d0', 'd1'].map((database) => p.db('web', 'query', { database, sql: RUNAWAY }));
    const first = firstEnd(runaways);
    const ended = await whileRunning(runaways, async () => {
      await pause(200); // the oldest holds the repo's runaway pass
      await assertServed('web', 'd3', 300, first);
      runaways.push(p.db('web', 'query', { database: 'd2', sql: RUNAWAY }));
      await pause(150);
      const refused = await p.db('web', 'execute', { database: 'd5', sql: 'INSERT INTO t VALUES (1)' });
      assert.equal(refused.status, 503, refused.text);
      assert.equal(refused.json.error.details.committed, false);
      await assertServed('site', 'main', 300, first, 'other');
    });
    for (const r of ended) assert.equal(r.json?.error?.code, 'query_timeout', r.text);
    const rows = await p.db('web', 'query', { database: 'd5', sql: 'SELECT count(*) FROM t' });
    assert.deepEqual(rows.json.results[0].rows, [[0]], 'the refused write never ran');
  });

  test('past DB_EXECUTORS_PER_REPO libSQL transactions each running a long statement (a third), its next write waits for its share: a transaction\'s long statement counts toward its repo\'s share (untagged, none counted, and the write ran beside them)', async () => {
    const clients = ['d0', 'd1', 'd2'].map((database) => createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback }));
    const long: Promise<void>[] = [];
    try {
      for (const [i, c] of clients.entries()) {
        const tx = await c.transaction('write');
        long.push(tx.execute(RUNAWAY).then(() => assert.fail('it ends only at its limit'), (e: Error) => assert.match(e.message, /ran past 2500 ms/)).finally(() => tx.close()));
        const slow = () => executorPids().filter(niced).length > i; // pinned to a process of its own, as above
        await waitFor(async () => slow() && (await pause(100), slow()), 3000, 'its statement running slow');
      }
      const first = firstEnd(long);
      const write = await p.db('web', 'execute', { database: 'd5', sql: 'INSERT INTO t VALUES (1)' });
      // Refused at its queue limit, or (on a loaded host) run once a transaction's statement ended: never beside all three.
      if (write.status === 503) assert.equal(write.json.error.details.committed, false, write.text);
      else assert.ok(first.at <= performance.now(), `served (${write.status}) while the three transactions' statements all ran`);
    } finally {
      await Promise.allSettled(long); // a failed test leaves none to the next
      for (const c of clients) c.close();
    }
    await Promise.all(long);
  });

  test('runaways on all 10 of its databases take no process from other repos: another org is served throughout, and the processes stay bounded', async () => {
    const executors = p.config.db.executors;
    const runaways = databases.map((database) => p.db('web', 'query', { database, sql: RUNAWAY }));
    const first = firstEnd(runaways);
    await pause(50);
    let most = 0;
    const counting = setInterval(() => (most = Math.max(most, executorPids().length)), 50);
    try {
      // Held behind the runaways, it would be refused until they ended.
      await assertServed('site', 'main', 2000, first, 'other');
    } finally {
      clearInterval(counting);
      await Promise.allSettled(runaways); // a failed test leaves none to the next
    }
    for (const r of await Promise.all(runaways)) assert.ok(r.status === 422 || r.status === 503, `a runaway ends in query_timeout or is refused (${r.status} ${r.text})`);
    // 2 × DB_EXECUTORS + 2, and one more for each runaway pass (DB_EXECUTORS of them in the server).
    assert.ok(most <= 3 * executors + 2, `at most ${3 * executors + 2} executor processes (saw ${most})`);
  });
});

describe('a read sent down a pipe behind its repo\'s runaway, the repo\'s share full', () => {
  // One process per repo. Quick reads first, so a process takes reads about 1 ms deep (its pipeline depth): the read
  // goes down the pipe behind the runaway sent with it, before that is known to be slow, and is hedged from there.
  let p: Product;
  before(async () => {
    p = await startProduct({ DB_EXECUTORS: '2', DB_EXECUTORS_PER_REPO: '1', DB_QUERY_TIMEOUT_MS: '3000', DB_QUEUE_TIMEOUT_MS: '300' });
    await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
  });
  after(() => p.close());

  async function behindRunaway(): Promise<number> {
    for (let i = 0; i < 50; i++) await Promise.all([p.db('web', 'query', { sql: 'SELECT 1' }), p.db('warm', 'query', { sql: 'SELECT 1' })]);
    const runaway = p.db('web', 'query', { sql: RUNAWAY });
    const t0 = performance.now();
    const read = await p.db('web', 'query', { sql: 'SELECT count(*) FROM t' });
    const waited = performance.now() - t0;
    if (read.status !== 200) assert.equal(read.json?.error?.details?.committed, false, read.text);
    await runaway;
    return waited;
  }

  test('is answered in time (run on the repo\'s runaway pass, or refused at DB_QUEUE_TIMEOUT_MS), not held until the runaway is stopped at its 3000 ms', async () => {
    const waited = await behindRunaway();
    assert.ok(waited < 1500, `answered after ${waited.toFixed(0)} ms`);
  });

  test('with the repo\'s one runaway pass held by an older runaway, too', async () => {
    const older = p.db('web', 'query', { sql: RUNAWAY });
    await pause(200); // it holds the repo's runaway pass
    const waited = await behindRunaway();
    assert.ok(waited < 1500, `answered after ${waited.toFixed(0)} ms`);
    assert.equal((await older).json?.error?.code, 'query_timeout');
  });
});

describe('a quick read sent together with a runaway, down the same pipe', () => {
  test('is answered when it is done, not held until the runaway is stopped (it got 422 query_timeout, as if it were the runaway)', async () => {
    // One process: both go down its pipe in one write, the read first. The executor ran both from one chunk and sent
    // their replies at its end; the read's waited behind the runaway, and the parent stopped the process at the read's
    // limit, the read's reply still unsent.
    const p = await startProduct({ DB_EXECUTORS: '1', DB_QUERY_TIMEOUT_MS: '1000', DB_QUEUE_TIMEOUT_MS: '5000' });
    try {
      await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' });
      for (let round = 0; round < 3; round++) {
        const answered = (r: HttpResult) => ({ r, at: performance.now() });
        const [quick, runaway] = await Promise.all([
          p.db('web', 'query', { sql: 'SELECT count(*) FROM t' }).then(answered),
          p.db('web', 'query', { sql: RUNAWAY }).then(answered),
        ]);
        assert.equal(quick.r.status, 200, quick.r.text);
        assert.ok(quick.at < runaway.at, `answered ${(quick.at - runaway.at).toFixed(0)} ms after the runaway was stopped, not before`);
        assert.equal(runaway.r.json?.error?.code, 'query_timeout', runaway.r.text);
      }
    } finally {
      await p.close();
    }
  });
});

describe('one slow statement of a repo whose share is not full', () => {
  test('spawns one process (so DB_EXECUTORS stay free), not a second for a runaway pass it cannot use beyond its share', async () => {
    // A fresh server: DB_EXECUTORS processes, none idle extra. The pass's one more free process (kept for work beyond a
    // repo's share) was spawned for every statement past RUNAWAY_MS (a first write's fsync, a 150 ms report) and
    // retired 5 s later: two spawns per slow statement instead of one.
    const p = await startProduct({ DB_QUERY_TIMEOUT_MS: '2000' }); // DB_EXECUTORS 2, DB_EXECUTORS_PER_REPO 2
    try {
      const executors = p.config.db.executors;
      assert.equal(executorPids().length, executors);
      let most = 0;
      const counting = setInterval(() => (most = Math.max(most, executorPids().length)), 10);
      const runaway = p.db('web', 'execute', { sql: RUNAWAY });
      await pause(1000); // well past SLOW_MS (20 ms) and RUNAWAY_MS (100 ms), before its limit
      clearInterval(counting);
      assert.equal(most, executors + 1, `the slow one and ${executors} free (saw ${most} processes)`);
      assert.equal((await runaway).json?.error?.code, 'query_timeout');
      assert.equal((await p.db('web', 'execute', { sql: 'SELECT 1' })).status, 200, 'served after it');
    } finally {
      await p.close();
    }
  });
});
