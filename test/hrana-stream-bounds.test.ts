// SPEC 4.10: the bounds on a libSQL stream's resources, sent as raw Hrana JSON through the proxy: interactive
// transactions per repo and in all, the executors they may hold, and streams per repo and in all.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { MAX_STREAMS_PER_REPO } from '../src/db/hrana/streams.ts';
import { MAX_TRANSACTIONS_PER_REPO } from '../src/db/hrana/transaction.ts';

let p: Product;
const pipeline = (body: unknown, path = '/web/_db/v2/pipeline', repo = 'web') =>
  p.call(path, { body, headers: { authorization: `Bearer ${p.secret('acme', repo)}` } });

before(async () => {
  p = await startProduct();
});
after(() => p.close());

describe('the protocol (libSQL HTTP_V2_SPEC, HRANA_3_SPEC)', () => {
  test(`interactive transactions are bounded: ${MAX_TRANSACTIONS_PER_REPO} per repo and DB_MAX_TRANSACTIONS in all; a full server makes room from the busiest repo, or refuses BEGIN, nothing else`, async () => {
    const q = await startProduct({ DB_MAX_TRANSACTIONS: String(MAX_TRANSACTIONS_PER_REPO + 2) });
    try {
      const send = async (repo: string, db: string, baton: string | null, sql: string) => {
        const r = await q.call(`/${repo}/_db/${db}/v2/pipeline`, { body: { baton, requests: [{ type: 'execute', stmt: { sql } }] }, headers: { authorization: `Bearer ${q.secret('acme', repo)}` } });
        assert.equal(r.status, 200, r.text);
        return { baton: r.json.baton as string, result: r.json.results[0] };
      };
      const open: { db: string; baton: string }[] = [];
      for (let i = 0; i < MAX_TRANSACTIONS_PER_REPO; i++) {
        const r = await send('busy', `db${i}`, null, 'BEGIN');
        assert.equal(r.result.type, 'ok', JSON.stringify(r.result));
        open.push({ db: `db${i}`, baton: r.baton });
      }
      const refused = await send('busy', 'one-more', null, 'BEGIN');
      assert.equal(refused.result.type, 'error');
      assert.match(refused.result.error.message, new RegExp(`this repo has ${MAX_TRANSACTIONS_PER_REPO} interactive transactions open`));
      const outside = await send('busy', 'one-more', null, 'SELECT 1');
      assert.equal(outside.result.type, 'ok', `statements outside a transaction still run: ${JSON.stringify(outside.result)}`);
      assert.equal((await send('quiet', 'x', null, 'BEGIN')).result.type, 'ok', 'another repo still begins');
      assert.equal((await send('quiet', 'y', null, 'BEGIN')).result.type, 'ok');
      // The server is full; a repo holding fewer than the busiest takes the place of its least recently used
      // transaction (it used to be refused: one org's repos at their cap kept every other org from BEGIN).
      assert.equal((await send('third', 'z', null, 'BEGIN')).result.type, 'ok', 'a third repo still begins');
      const evicted = await q.call(`/busy/_db/${open[0]!.db}/v2/pipeline`, { body: { baton: open[0]!.baton, requests: [] }, headers: { authorization: `Bearer ${q.secret('acme', 'busy')}` } });
      assert.equal(evicted.status, 400, 'the busiest repo\'s least recently used transaction was rolled back, its stream closed');
      assert.match(evicted.json.error.message, /unknown baton/);
      open.shift();
      const full = await send('busy', 'one-more', null, 'BEGIN');
      assert.match(full.result.error?.message ?? '', /DB_MAX_TRANSACTIONS \(34\) interactive transactions open/, 'the busiest repo itself is refused: the server is full');
      // Ending one frees its place.
      const next = open.shift()!;
      assert.equal((await send('busy', next.db, next.baton, 'ROLLBACK')).result.type, 'ok');
      assert.equal((await send('busy', 'one-more', null, 'BEGIN')).result.type, 'ok');
    } finally {
      await q.close();
    }
  });

  test('transactions of many repos never take the last DB_EXECUTORS processes from everyone else (6 repos with one each left none: 503 for every other org)', async () => {
    const q = await startProduct({ DB_EXECUTORS: '2' }); // at most 2 × 2 + 2 = 6 processes
    try {
      assert.equal((await q.db('app', 'execute', { sql: 'CREATE TABLE t(x)' }, { org: 'victim' })).status, 200);
      const open: { repo: string; baton: string }[] = [];
      for (let i = 1; i <= 8; i++) {
        const repo = `p${i}`;
        for (const [mode, db] of [['BEGIN TRANSACTION READONLY', 'main'], ['BEGIN', 'w']] as const) {
          const r = await q.call(`/${repo}/_db/${db}/v2/pipeline`, { body: { baton: null, requests: [{ type: 'execute', stmt: { sql: mode } }, { type: 'execute', stmt: { sql: 'SELECT 1' } }] }, headers: { authorization: `Bearer ${q.secret('acme', repo)}` } });
          assert.equal(r.json.results[1].type, 'ok', r.text);
          open.push({ repo, baton: r.json.baton });
        }
        const t0 = performance.now();
        const other = await q.db('app', 'query', { sql: 'SELECT count(*) FROM t' }, { org: 'victim' });
        assert.equal(other.status, 200, `with ${i} repos holding transactions: ${other.text}`);
        // under DB_QUEUE_TIMEOUT_MS (1 s): it did not wait for a process to come free (a loaded machine took 422 ms)
        assert.ok(performance.now() - t0 < 900, `answered at once with ${i} repos holding transactions (${(performance.now() - t0).toFixed(0)} ms)`);
      }
    } finally {
      await q.close();
    }
  });

  test('past DB_MAX_STREAMS in all, the busiest repo gives up its least recently used stream: no repo keeps others out', async () => {
    const q = await startProduct({ DB_MAX_STREAMS: '20' });
    try {
      const open = async (repo: string) => (await q.call(`/${repo}/_db/v2/pipeline`, { body: { baton: null, requests: [] }, headers: { authorization: `Bearer ${q.secret('acme', repo)}` } })).json.baton as string;
      const alive = async (repo: string, baton: string) => {
        const r = await q.call(`/${repo}/_db/v2/pipeline`, { body: { baton, requests: [] }, headers: { authorization: `Bearer ${q.secret('acme', repo)}` } });
        return r.status === 200 ? r.json.baton as string : null;
      };
      const hog: string[] = [];
      for (let i = 0; i < 15; i++) hog.push(await open('hog'));
      const small: string[] = [];
      for (let i = 0; i < 5; i++) small.push(await open('small'));
      const newcomer = await open('newcomer');
      assert.ok(newcomer, 'a new repo still gets a stream when the server is full');
      assert.equal(await alive('hog', hog[0]!), null, 'the busiest repo\'s least recently used stream made room');
      for (const [i, b] of small.entries()) small[i] = (await alive('small', b))!;
      assert.ok(small.every(Boolean), 'the smaller repo kept every stream');
      assert.ok(await alive('newcomer', newcomer));
    } finally {
      await q.close();
    }
  });

  test(`a repo keeps at most ${MAX_STREAMS_PER_REPO} streams open: past that its own oldest is closed, another repo's are not`, async () => {
    const theirs = (await pipeline({ baton: null, requests: [] }, '/site/_db/v2/pipeline', 'site')).json.baton;
    const batons: string[] = [];
    for (let i = 0; i <= MAX_STREAMS_PER_REPO; i++) batons.push((await pipeline({ baton: null, requests: [] })).json.baton);
    assert.equal((await pipeline({ baton: batons[0], requests: [] })).status, 400, 'the oldest is gone');
    assert.equal((await pipeline({ baton: batons[1], requests: [{ type: 'close' }] })).status, 200, 'the next one lives');
    assert.equal((await pipeline({ baton: theirs, requests: [{ type: 'close' }] }, '/site/_db/v2/pipeline', 'site')).status, 200, 'another repo\'s stream lives');
  });
});
