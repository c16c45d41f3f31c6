// SPEC 4.10 with SPEC 4.4's limits and 4.5's creation rule: a pipeline's results, batches and transactions are held
// to what /_db/query and /_db/execute are, and reads create no database, sent as raw Hrana JSON through the proxy.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { executorPids, openFiles } from './helpers/processes.ts';

describe('SPEC 4.4\'s limits and 4.5\'s creation rule hold on the protocol too', () => {
  let q: Product;
  before(async () => {
    q = await startProduct({ DB_MAX_RESULT_BYTES: '100000', DB_MAX_STATEMENTS: '5' });
  });
  after(() => q.close());
  const send = (body: unknown, path = '/web/_db/v2/pipeline') => q.call(path, { body, headers: { authorization: `Bearer ${q.secret('acme', 'web')}` } });
  const big = { type: 'execute', stmt: { sql: 'SELECT randomblob(40000) AS b' } };

  test('results count against DB_MAX_RESULT_BYTES across a pipeline, as across a /_db/query batch', async () => {
    const r = await send({ baton: null, requests: [big, big, big, big] });
    assert.equal(r.status, 200, r.text);
    const kinds = r.json.results.map((x: { type: string; error?: { code: string } }) => x.error?.code ?? x.type);
    assert.deepEqual(kinds.slice(0, 1), ['ok']);
    assert.ok(kinds.includes('SQLITE_TOOBIG'), JSON.stringify(kinds));
    assert.ok(r.text.length < 200_000, `the reply is ${r.text.length} bytes, about the limit, not four results`);
  });

  test('a batch\'s steps draw on the same allowance, and so do statements of an interactive transaction', async () => {
    const steps = Array.from({ length: 5 }, () => ({ stmt: { sql: 'SELECT randomblob(40000) AS b' } }));
    const r = await send({ baton: null, requests: [{ type: 'batch', batch: { steps } }] });
    const { step_results: results, step_errors: errors } = r.json.results[0].response.result;
    assert.ok(results[0] !== null && errors.some((e: { code: string } | null) => e?.code === 'SQLITE_TOOBIG'), r.text.slice(0, 300));
    assert.ok(r.text.length < 200_000, `the reply is ${r.text.length} bytes`);
    const open = await send({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, big, big, big, big, { type: 'execute', stmt: { sql: 'ROLLBACK' } }], }, '/web/_db/txbig/v2/pipeline');
    assert.ok(open.text.length < 100_000, `in a transaction the reply is ${open.text.length} bytes: within the allowance`);
    assert.ok(open.json.results.some((x: { error?: { code: string } }) => x.error?.code === 'SQLITE_TOOBIG'), open.text.slice(0, 300));
  });

  test('a batch holds at most DB_MAX_STATEMENTS steps', async () => {
    const steps = Array.from({ length: 6 }, () => ({ stmt: { sql: 'SELECT 1' } }));
    const r = await send({ baton: null, requests: [{ type: 'batch', batch: { steps } }, { type: 'batch', batch: { steps: steps.slice(1) } }] });
    assert.equal(r.json.results[0].type, 'error', r.text);
    assert.match(r.json.results[0].error.message, /at most 5 steps \(DB_MAX_STATEMENTS\), got 6/);
    assert.equal(r.json.results[1].type, 'ok', 'five are fine');
    // @libsql/client's batch(…, 'write') and migrate() add BEGIN, COMMIT, ROLLBACK and the foreign_keys pragmas: not statements.
    const wrapped = [{ stmt: { sql: 'PRAGMA foreign_keys=off' } }, { stmt: { sql: 'BEGIN IMMEDIATE' } }, ...steps.slice(1).map((s, i) => ({ ...s, condition: { type: 'ok', step: i + 1 } })), { stmt: { sql: 'COMMIT' }, condition: { type: 'ok', step: 6 } }, { stmt: { sql: 'ROLLBACK' }, condition: { type: 'not', cond: { type: 'ok', step: 7 } } }, { stmt: { sql: 'PRAGMA foreign_keys=on' } }];
    const w = await send({ baton: null, requests: [{ type: 'batch', batch: { steps: wrapped } }] });
    assert.deepEqual(w.json.results[0].response?.result.step_errors, wrapped.map(() => null), w.text);
  });

  test('reads of a database that does not exist answer as an empty one would, and do not create it', async () => {
    const r = await send({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'SELECT 1 AS one' } }, { type: 'execute', stmt: { sql: "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'" } }, { type: 'describe', sql: 'SELECT 1 AS one' }] }, '/web/_db/ghost/v2/pipeline');
    assert.equal(r.json.results[0].type, 'ok', r.text);
    assert.deepEqual(r.json.results[0].response.result.rows, [[{ type: 'integer', value: '1' }]]);
    assert.deepEqual(r.json.results[1].response.result.rows, []);
    assert.deepEqual(r.json.results[2].response.result.cols, [{ name: 'one', decltype: null }], 'describe too');
    const s = await q.db('web', 'status', { database: 'ghost' });
    assert.equal(s.json.exists, false, 'no database was created by reading it');
    // Nor do other requests that change nothing: a pragma, a sequence, a transaction.
    const more = await send({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'PRAGMA user_version' } }, { type: 'sequence', sql: 'SELECT 1; SELECT 2' }] }, '/web/_db/ghost/v2/pipeline');
    assert.deepEqual(more.json.results.map((x: { type: string }) => x.type), ['ok', 'ok'], more.text);
    assert.equal((await q.db('web', 'status', { database: 'ghost' })).json.exists, false, 'still none');
    for (const end of ['COMMIT', 'ROLLBACK']) {
      const begun = await send({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, { type: 'execute', stmt: { sql: 'SELECT 1' } }] }, '/web/_db/ghost/v2/pipeline');
      await send({ baton: begun.json.baton, requests: [{ type: 'execute', stmt: { sql: end } }, { type: 'close' }] }, '/web/_db/ghost/v2/pipeline');
      assert.equal((await q.db('web', 'status', { database: 'ghost' })).json.exists, false, `a transaction that changed nothing (${end}) leaves none`);
    }
    // A write does create it, as /_db/execute does.
    const w = await send({ baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }] }, '/web/_db/ghost/v2/pipeline');
    assert.equal(w.json.results[0].type, 'ok', w.text);
    assert.equal((await q.db('web', 'status', { database: 'ghost' })).json.exists, true);
  });

  test('reads of a database that does not exist are answered in a repo at DB_MAX_DATABASES_PER_REPO: they create nothing', async () => {
    const r = await startProduct({ DB_MAX_DATABASES_PER_REPO: '1' });
    try {
      const run = (database: string, requests: unknown[]) => r.call(`/web/_db/${database}/v2/pipeline`, { body: { baton: null, requests }, headers: { authorization: `Bearer ${r.secret('acme', 'web')}` } });
      assert.equal((await run('main', [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }])).json.results[0].type, 'ok');
      const reads = await run('other', [{ type: 'execute', stmt: { sql: 'SELECT 1' } }, { type: 'execute', stmt: { sql: 'PRAGMA user_version' } }]);
      assert.deepEqual(reads.json.results.map((x: { type: string }) => x.type), ['ok', 'ok'], reads.text);
      const write = await run('other', [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }]);
      assert.equal(write.json.results[0].error?.code, 'SQLITE_FULL', `a write still counts: ${write.text}`);
    } finally {
      await r.close();
    }
  });

  test('a transaction on a database that does not exist, whose executor is stopped (its time limit, or killed), leaves no database', async () => {
    const r = await startProduct({ DB_QUERY_TIMEOUT_MS: '3000' }); // a BEGIN's fsyncs fit in it on a loaded machine
    try {
      const run = (database: string, body: unknown) => r.call(`/web/_db/${database}/v2/pipeline`, { body, headers: { authorization: `Bearer ${r.secret('acme', 'web')}` } });
      const file = (database: string) => join(r.dataDir, 'db', 'acme', 'web', `${database}.sqlite`);
      const runaway = { type: 'execute', stmt: { sql: 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c' } };
      // At its time limit: the statement's executor is stopped, and the transaction with it.
      const stopped = await run('ghostrun', { baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }, runaway] });
      assert.equal(stopped.json.results[1].error?.code, 'SQLITE_INTERRUPT', stopped.text);
      // Killed from outside (out of memory, an operator) while the statement runs.
      const begun = await run('ghostkill', { baton: null, requests: [{ type: 'execute', stmt: { sql: 'BEGIN' } }] });
      assert.equal(begun.json.results[0].type, 'ok', begun.text);
      assert.ok(existsSync(file('ghostkill')), 'the open transaction made its file (the premise)');
      const killed = run('ghostkill', { baton: begun.json.baton, requests: [runaway] });
      await new Promise((done) => setTimeout(done, 300));
      const holders = executorPids().filter((pid) => openFiles(pid).includes(file('ghostkill')));
      assert.ok(holders.length > 0, 'the transaction\'s executor holds its file');
      for (const pid of holders) process.kill(pid, 'SIGKILL');
      const lost = await killed;
      assert.equal(lost.json?.results?.[0]?.type, 'error', lost.text);
      for (const database of ['ghostrun', 'ghostkill']) {
        const s = await r.db('web', 'status', { database });
        assert.equal(s.json.exists, false, `${database}: ${s.text}`);
        assert.ok(!s.json.databases.includes(database), s.text);
        assert.ok(!existsSync(file(database)), `${database}: no file is left`);
        // Its first write is a first write: it makes the database, at version 1.
        const w = await run(database, { baton: null, requests: [{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }, { type: 'close' }] });
        assert.equal(w.json.results[0].type, 'ok', w.text);
        assert.equal((await r.db('web', 'status', { database })).json.version, 1);
      }
    } finally {
      await r.close();
    }
  });
});
