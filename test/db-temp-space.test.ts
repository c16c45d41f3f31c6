// DB_TEMP_MAX_BYTES (SPEC 4.8's limits, src/db/DESIGN.md "Temporary space"): a statement whose SQLite temporary files
// (a sort, GROUP BY, a materialized CTE, an index build) outgrow the limit is stopped with 507 quota_exceeded naming
// it; the files live in DATA_DIR/tmp, not the OS's temp directory; other repos are served meanwhile and
// the same repo afterwards; work under the limit, spilling to disk included, is untouched. Real server, real HTTP.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/shared/config.ts';
import { startProduct, tempDir, testEnv, type HttpResult, type Product } from './helpers/product.ts';
import { executorPids, openFiles } from './helpers/processes.ts';
import { upload } from './helpers/imports.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const LIMIT = 32 * 1024 * 1024;
const rows = (n: number) => `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT ${n})`;
/** ~220 MB of sorted runs on disk (2 M rows of 100 random bytes, sorted by them); the result is one row. */
const SPILL = `${rows(2_000_000)} SELECT count(*) AS n FROM (SELECT x, randomblob(100) AS b FROM c ORDER BY b)`;
/** ~22 MB of sorted runs: it spills to disk too, under the limit. */
const UNDER = `${rows(200_000)} SELECT count(*) AS n FROM (SELECT x, randomblob(100) AS b FROM c ORDER BY b)`;

let p: Product;
before(async () => {
  // The time limit is far off: what stops the statement here is its temporary files, not its time. A write queued
  // behind a runaway waits for it to be stopped (on a loaded machine, seconds) rather than being refused as overload.
  p = await startProduct({ DB_TEMP_MAX_BYTES: String(LIMIT), DB_QUERY_TIMEOUT_MS: '60000', DB_QUEUE_TIMEOUT_MS: '30000', DB_QUEUE_TARGET_MS: '30000' });
});
after(() => p.close());

/** SQLite's temporary files open in the executors while `during` runs, sampled every few ms: where they were, and the most at once. */
async function watchTempFiles<T>(during: Promise<T>): Promise<{ result: T; dirs: Set<string>; peak: number }> {
  const dirs = new Set<string>();
  let peak = 0;
  const timer = setInterval(() => {
    for (const pid of executorPids()) {
      try {
        const temp = openFiles(pid).filter((f) => f.includes('/etilqs_'));
        for (const f of temp) dirs.add(f.slice(0, f.lastIndexOf('/')));
        peak = Math.max(peak, temp.length);
      } catch {
        // the process ended meanwhile
      }
    }
  }, 3);
  try {
    return { result: await during, dirs, peak };
  } finally {
    clearInterval(timer);
  }
}

function assertTempRefusal(r: HttpResult): void {
  assert.equal(r.status, 507, r.text);
  assert.deepEqual(Object.keys(r.json), ['error']);
  const { code, message, details } = r.json.error;
  assert.equal(code, 'quota_exceeded');
  assert.match(message, /temporary files/);
  assert.match(message, /grew past 32 MiB, the limit per executor process \(DB_TEMP_MAX_BYTES\)/);
  assert.match(message, /nothing of this request was applied/);
  assert.deepEqual(details, { tempMaxBytes: LIMIT });
  assert.doesNotMatch(r.text, /\/tmp|\/proc|etilqs|at .*\.ts/, 'no path or stack in the body');
}

describe('DB_TEMP_MAX_BYTES', () => {
  test('a sort that spills past the limit gets 507 naming it; another repo is served meanwhile and the same repo after', async () => {
    assert.equal((await p.db('big', 'execute', { statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (1)' }] })).status, 200);
    assert.equal((await p.db('quiet', 'execute', { statements: [{ sql: 'CREATE TABLE t(x)' }, { sql: 'INSERT INTO t VALUES (7)' }] })).status, 200);

    const spilling = watchTempFiles(p.db('big', 'query', { sql: SPILL }));
    // Meanwhile: another repo reads and writes, and another database of the same repo reads.
    const meanwhile: HttpResult[] = [];
    let done = false;
    void spilling.then(() => (done = true));
    while (!done) {
      meanwhile.push(await p.db('quiet', 'query', { sql: 'SELECT x FROM t' }));
      meanwhile.push(await p.db('quiet', 'execute', { sql: 'UPDATE t SET x = x + 1' }));
      await new Promise((r) => setTimeout(r, 20));
    }
    const { result, dirs, peak } = await spilling;
    assertTempRefusal(result);
    assert.ok(peak > 0, 'the sort did spill to temporary files');
    assert.deepEqual([...dirs], [join(p.dataDir, 'tmp')], 'temporary files are in DATA_DIR/tmp, not the OS temp directory');
    assert.ok(meanwhile.length >= 2);
    for (const r of meanwhile) assert.equal(r.status, 200, r.text);

    // Afterwards: the same repo and database answer, on a new executor process; the other repo too.
    const same = await p.db('big', 'query', { sql: 'SELECT x FROM t' });
    assert.equal(same.status, 200, same.text);
    assert.deepEqual(same.json.results[0].rows, [[1]]);
    const quiet = await p.db('quiet', 'query', { sql: 'SELECT x FROM t' });
    assert.equal(quiet.status, 200, quiet.text);
    assert.equal(quiet.json.results[0].rows[0][0], 7 + meanwhile.length / 2);
  });

  test('GROUP BY and a materialized CTE past the limit get the same 507', async () => {
    for (const sql of [
      `${rows(2_000_000)} SELECT count(*) AS n FROM (SELECT randomblob(100) AS b FROM c GROUP BY b)`,
      `${rows(2_000_000)}, m AS MATERIALIZED (SELECT x, randomblob(100) AS b FROM c) SELECT count(*) FROM m AS a JOIN m AS b ON a.x = b.x`,
    ]) assertTempRefusal(await p.db('big', 'query', { sql }));
  });

  test('a sort under the limit works, spilling to disk', async () => {
    const { result, peak } = await watchTempFiles(p.db('big', 'query', { sql: UNDER }));
    assert.equal(result.status, 200, result.text);
    assert.deepEqual(result.json.results[0].rows, [[200_000]]);
    assert.ok(peak > 0, 'it spilled to temporary files, under the limit');
  });

  test('a write past the limit gets 507 and applies nothing; a write to the same database sent with it commits; CREATE INDEX under the limit works', async () => {
    const made = await p.db('big', 'execute', { database: 'w', sql: 'CREATE TABLE ok(x)' });
    assert.equal(made.status, 200, made.text);
    const before = made.json.version as number;
    const [runaway, good] = await Promise.all([
      p.db('big', 'execute', { database: 'w', sql: `CREATE TABLE sorted AS ${SPILL.replace('count(*) AS n', 'x, b')}` }),
      p.db('big', 'execute', { database: 'w', sql: 'INSERT INTO ok VALUES (1)' }),
    ]);
    assertTempRefusal(runaway);
    assert.equal(good.status, 200, good.text);
    const status = await p.db('big', 'status', { database: 'w' });
    assert.deepEqual(status.json.tables.map((t: { name: string }) => t.name), ['ok'], 'the runaway CREATE TABLE left nothing');
    assert.equal(status.json.version, before + 1);

    // 100,000 rows of 100 bytes: the index build spills about 11 MB, under the limit.
    const fill = await p.db('big', 'execute', { database: 'w', sql: `CREATE TABLE items AS ${rows(100_000)} SELECT x, randomblob(100) AS b FROM c` });
    assert.equal(fill.status, 200, fill.text);
    const index = await p.db('big', 'execute', { database: 'w', sql: 'CREATE INDEX items_b ON items(b)' });
    assert.equal(index.status, 200, index.text);
  });

  test('the libSQL protocol gets the refusal as SQLITE_FULL with the same message', async () => {
    const r = await p.call('/big/_db/v2/pipeline', { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: SPILL } }, { type: 'close' }] }, headers: { authorization: `Bearer ${p.secret('acme', 'big')}` } });
    assert.equal(r.status, 200, r.text);
    const first = r.json.results[0];
    assert.equal(first.type, 'error', r.text);
    assert.equal(first.error.code, 'SQLITE_FULL');
    assert.match(first.error.message, /DB_TEMP_MAX_BYTES/);
  });
});

test('configuration: the default follows DB_MAX_SIZE_BYTES; a bad value stops the start naming the variable', () => {
  const dir = tempDir();
  assert.equal(loadConfig(testEnv(dir)).db.tempMaxBytes, 3 * 1024 ** 3, '2 × 1 GiB + 1 GiB');
  assert.equal(loadConfig(testEnv(dir, { DB_MAX_SIZE_BYTES: String(64 * 1024 ** 2) })).db.tempMaxBytes, 2 * 64 * 1024 ** 2 + 1024 ** 3);
  assert.equal(loadConfig(testEnv(dir, { DB_TEMP_MAX_BYTES: '1048576' })).db.tempMaxBytes, 1024 * 1024);
  for (const bad of ['12MB', '-1', '1000']) {
    assert.throws(() => loadConfig(testEnv(dir, { DB_TEMP_MAX_BYTES: bad })), (e: unknown) => e instanceof ConfigError && /^DB_TEMP_MAX_BYTES: /.test(e.message));
  }
});

test('an import replacing a database near DB_MAX_SIZE_BYTES, a restore of it, and CREATE INDEX fit in 2 × DB_MAX_SIZE_BYTES of temporary space', async () => {
  // The default adds 1 GiB to 2 × DB_MAX_SIZE_BYTES; here the 2 × alone must do: what an import (install.ts) needs.
  const size = 32 * 1024 * 1024;
  const q = await startProduct({ DB_MAX_SIZE_BYTES: String(size), DB_TEMP_MAX_BYTES: String(2 * size), DB_QUERY_TIMEOUT_MS: '60000' });
  const dir = tempDir();
  try {
    const file = (seed: number) => {
      const path = join(dir, `full-${seed}.sqlite`);
      const db = openSqlite(path);
      // ~26 MB: a table of 70,000 rows of 80 hex characters and 120 random bytes, and an index on both columns.
      db.exec(`CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b BLOB); ${rows(70_000)} INSERT INTO t SELECT x, hex(randomblob(40)), randomblob(120) FROM c; CREATE INDEX t_ba ON t(b, a);`);
      db.close();
      const bytes = readFileSync(path);
      assert.ok(bytes.length > size * 0.7 && bytes.length < size, `${bytes.length} bytes`);
      return bytes;
    };
    const first = await upload(q, 'full', 'database=main&mode=create', file(1));
    assert.equal(first.status, 200, first.text);
    // Replacing reuses the old rows' pages: their statement journal lives until COMMIT, and the index sort comes on top.
    const { result: second, peak } = await watchTempFiles(upload(q, 'full', 'database=main&mode=replace', file(2)));
    assert.equal(second.status, 200, second.text);
    assert.ok(peak > 0, 'the replace used temporary files');
    const restored = await q.db('full', 'restore', { toVersion: 1 });
    assert.equal(restored.status, 200, restored.text);
    // An index rebuilt at the size limit, in one request: its sort, and the journal of the freed pages it reuses.
    const index = await q.db('full', 'execute', { statements: [{ sql: 'DROP INDEX t_ba' }, { sql: 'CREATE INDEX t_ab ON t(a, b)' }] });
    assert.equal(index.status, 200, index.text);
    const count = await q.db('full', 'query', { sql: 'SELECT count(*) FROM t' });
    assert.deepEqual(count.json.results[0].rows, [[70_000]]);
  } finally {
    await q.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
