// SPEC 4.10: what libSQL-protocol streams keep between requests is bounded per repo and per process, not only per
// stream. An attacker held 256 streams in each of five repos, each with 4 MiB of stored SQL kept alive by empty
// requests, and the heap ran out: stored SQL now counts against DB_STORED_SQL_MAX_BYTES_PER_REPO and
// DB_STORED_SQL_MAX_BYTES, and is let go when its stream closes, expires or is closed to make room.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createClient } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { MAX_STREAMS_PER_REPO, storedBytes } from '../src/db/hrana/streams.ts';

const KIB = 1024;
/** A text of `chars` characters, and what it counts as: 2 bytes a character and 64 for its entry. */
const text = (chars: number, fill = 'x') => `SELECT '${fill.repeat(chars - 9)}'`;
const TEXT = text(50_000);
const COST = 2 * 50_000 + 64;
const HOW = 'a text counts 2 bytes per character and 64 for its entry';

type Result = { type: 'ok' | 'error'; response?: { type: string }; error?: { message: string; code: string } };

function piper(q: Product) {
  return async (repo: string, baton: string | null, requests: unknown[]): Promise<{ baton: string | null; results: Result[] }> => {
    const r = await q.call(`/${repo}/_db/v2/pipeline`, { body: { baton, requests }, headers: { authorization: `Bearer ${q.secret('acme', repo)}` } });
    assert.equal(r.status, 200, r.text);
    return { baton: r.json.baton, results: r.json.results };
  };
}
const store = (id: number, sql = TEXT) => ({ type: 'store_sql', sql_id: id, sql });
const types = (results: Result[]) => results.map((r) => r.type);

const repoRefusal = (max: number, stored: number, size: number) =>
  `this repo's streams store at most ${max} bytes of SQL texts (DB_STORED_SQL_MAX_BYTES_PER_REPO; ${HOW}), ${stored} are stored and this one is ${size}; close_sql the ones no longer used, or close streams`;

test('stored SQL counts 2 bytes per character and 64 for its entry', () => {
  assert.equal(storedBytes(TEXT), COST);
  assert.equal(storedBytes('ā'), 66, 'a character past Latin-1 counts as much as an ASCII one: two bytes, what the heap holds at most');
});

test('a repo past DB_STORED_SQL_MAX_BYTES_PER_REPO gets SQLITE_TOOBIG naming it, across its streams; another repo is unaffected; close_sql and close give it back', async () => {
  const perRepo = 256 * KIB; // two texts fit, a third does not
  const q = await startProduct({ DB_STORED_SQL_MAX_BYTES_PER_REPO: String(perRepo), DB_STORED_SQL_MAX_BYTES: String(10 * 1024 * KIB) });
  try {
    const send = piper(q);
    const one = await send('web', null, [store(1), store(2)]);
    assert.deepEqual(types(one.results), ['ok', 'ok']);
    // Another stream of the same repo: the budget is the repo's, not the stream's (each stream is far under its 4 MiB).
    const two = await send('web', null, [store(1), { type: 'execute', stmt: { sql_id: 1 } }, { type: 'execute', stmt: { sql: 'SELECT 7 AS n' } }]);
    assert.deepEqual(types(two.results), ['error', 'error', 'ok'], 'the refusal is the request\'s own: the stream goes on');
    assert.deepEqual(two.results[0]!.error, { code: 'SQLITE_TOOBIG', message: repoRefusal(perRepo, 2 * COST, COST) });
    assert.match(two.results[1]!.error!.message, /no SQL is stored as sql_id 1/);
    assert.ok(two.baton, 'the stream is still open');

    // Another repo of the same org stores as much, and the real client's statement cache (store_sql) works there.
    assert.deepEqual(types((await send('site', null, [store(1), store(2), { type: 'close' }])).results), ['ok', 'ok', 'ok']);
    const port = new URL(q.url).port;
    const c = createClient({ url: `http://acme.localhost:${port}/site/_db/`, authToken: q.secret('acme', 'site'), fetch: viaLoopback });
    try {
      const tx = await c.transaction('write');
      await tx.execute('CREATE TABLE t(x)');
      await tx.execute({ sql: 'INSERT INTO t VALUES (?)', args: [1] });
      await tx.commit();
      assert.equal((await c.execute('SELECT count(*) AS n FROM t')).rows[0]!.n, 1);
    } finally {
      c.close();
    }

    // close_sql gives a text's bytes back: the second stream now stores one.
    const freed = await send('web', one.baton, [{ type: 'close_sql', sql_id: 1 }]);
    const again = await send('web', two.baton, [store(1), store(2)]);
    assert.deepEqual(types(again.results), ['ok', 'error'], JSON.stringify(again.results));
    assert.equal(again.results[1]!.error!.message, repoRefusal(perRepo, 2 * COST, COST));
    // Closing a stream gives back all it stored.
    assert.deepEqual(types((await send('web', freed.baton, [{ type: 'close' }])).results), ['ok']);
    assert.deepEqual(types((await send('web', again.baton, [store(2), { type: 'execute', stmt: { sql_id: 2 } }, { type: 'close' }])).results), ['ok', 'ok', 'ok']);
    // Nothing is stored now: a new stream has the whole budget.
    assert.deepEqual(types((await send('web', null, [store(1), store(2), { type: 'close' }])).results), ['ok', 'ok', 'ok']);
  } finally {
    await q.close();
  }
});

test('a stream that expires (DB_STREAM_IDLE_MS) gives its stored SQL back', async () => {
  const q = await startProduct({ DB_STORED_SQL_MAX_BYTES_PER_REPO: String(256 * KIB), DB_STREAM_IDLE_MS: '400' });
  try {
    const send = piper(q);
    const full = await send('web', null, [store(1), store(2)]);
    assert.deepEqual(types(full.results), ['ok', 'ok']);
    assert.deepEqual(types((await send('web', null, [store(1), { type: 'close' }])).results), ['error', 'ok'], 'the budget is full');
    await new Promise((r) => setTimeout(r, 900));
    assert.deepEqual(types((await send('web', null, [store(1), store(2), { type: 'close' }])).results), ['ok', 'ok', 'ok'], 'the expired stream gave its bytes back');
    assert.equal((await q.call('/web/_db/v2/pipeline', { body: { baton: full.baton, requests: [] }, headers: { authorization: `Bearer ${q.secret('acme', 'web')}` } })).status, 400, 'that stream is gone');
  } finally {
    await q.close();
  }
});

test(`a stream closed to make room (past ${MAX_STREAMS_PER_REPO} of its repo) gives its stored SQL back`, async () => {
  const q = await startProduct({ DB_STORED_SQL_MAX_BYTES_PER_REPO: String(256 * KIB) });
  try {
    const send = piper(q);
    const full = await send('web', null, [store(1), store(2)]);
    assert.deepEqual(types(full.results), ['ok', 'ok']);
    // The full stream is the repo's least recently used: MAX_STREAMS_PER_REPO more close it.
    for (let i = 0; i < MAX_STREAMS_PER_REPO; i++) assert.deepEqual(types((await send('web', null, i === 0 ? [store(1)] : [])).results), i === 0 ? ['error'] : []);
    assert.deepEqual(types((await send('web', null, [store(1), store(2), { type: 'close' }])).results), ['ok', 'ok', 'ok'], 'the closed stream gave its bytes back');
    assert.equal((await q.call('/web/_db/v2/pipeline', { body: { baton: full.baton, requests: [] }, headers: { authorization: `Bearer ${q.secret('acme', 'web')}` } })).status, 400, 'that stream is gone');
  } finally {
    await q.close();
  }
});

test('past DB_STORED_SQL_MAX_BYTES in all, the repo storing the most gives way (its least recently used stream closes), so another repo still stores', async () => {
  const perRepo = 256 * KIB; // two texts per repo
  const max = 640 * KIB; // six texts and a small one: three repos fill it
  const q = await startProduct({ DB_STORED_SQL_MAX_BYTES_PER_REPO: String(perRepo), DB_STORED_SQL_MAX_BYTES: String(max) });
  try {
    const send = piper(q);
    const batons = new Map<string, string>();
    for (const repo of ['a1', 'a2', 'a3']) {
      const r = await send(repo, null, [store(1), store(2)]);
      assert.deepEqual(types(r.results), ['ok', 'ok'], repo);
      batons.set(repo, r.baton!);
    }
    // a2 holds one more stream with one text: it stores the most now (three texts).
    const extra = await send('a2', null, [store(1, text(10_000))]);
    assert.deepEqual(types(extra.results), ['ok']);
    const stored = await send('a4', null, [store(1), { type: 'execute', stmt: { sql: 'SELECT 1' } }, { type: 'close' }]);
    assert.deepEqual(types(stored.results), ['ok', 'ok', 'ok'], 'a new repo\'s text is stored: room was made');
    const gone = await q.call('/a2/_db/v2/pipeline', { body: { baton: batons.get('a2'), requests: [{ type: 'execute', stmt: { sql: 'SELECT 1' } }] }, headers: { authorization: `Bearer ${q.secret('acme', 'a2')}` } });
    assert.equal(gone.status, 400, gone.text);
    assert.match(gone.json.error.message, /unknown baton/, 'the heaviest repo\'s least recently used stream was closed');
    assert.deepEqual(types((await send('a2', extra.baton, [{ type: 'execute', stmt: { sql_id: 1 } }])).results), ['ok'], 'its newer stream is kept');
    for (const repo of ['a1', 'a3']) assert.deepEqual(types((await send(repo, batons.get(repo)!, [{ type: 'execute', stmt: { sql_id: 2 } }])).results), ['ok'], `${repo} kept its stream`);
  } finally {
    await q.close();
  }
});

test('the attack, scaled down: stored SQL grows the heap by about its budget, not by what many repos\' streams send', async () => {
  setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const max = 32 * 1024 * KIB;
  // On a loaded machine: parsing 1 MiB bodies in parallel must not be refused as overload (DB_MAX_LOOP_DELAY_MS),
  // and no stream may expire while the others are sent (DB_STREAM_IDLE_MS), as the attacker's were kept alive.
  const q = await startProduct({ DB_STORED_SQL_MAX_BYTES_PER_REPO: String(8 * 1024 * KIB), DB_STORED_SQL_MAX_BYTES: String(max), DB_MAX_LOOP_DELAY_MS: '0', DB_STREAM_IDLE_MS: '600000' });
  try {
    const heap = () => {
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    const before = heap();
    // Texts with characters past Latin-1 are held two bytes a character: 1 MiB each. 8 repos × 8 streams × 4 texts
    // are 256 MiB sent; 32 MiB may stay.
    const big = text(512 * KIB, 'ā');
    const kept: string[] = [];
    let ok = 0;
    await Promise.all(Array.from({ length: 8 }, async (_, r) => {
      for (let s = 0; s < 8; s++) {
        let baton: string | null = null;
        for (let i = 1; i <= 4; i++) {
          const res = await q.call(`/hog${r}/_db/v2/pipeline`, { body: { baton, requests: [store(i, big)] }, headers: { authorization: `Bearer ${q.secret('acme', `hog${r}`)}` } });
          if (res.status === 400 && /unknown baton/.test(res.text)) {
            baton = null; // closed to make room for another repo's text (the heaviest repo's oldest stream): a new one
            continue;
          }
          assert.equal(res.status, 200, res.text);
          baton = res.json.baton;
          if (res.json.results[0].type === 'ok') ok++;
        }
        if (baton) kept.push(baton);
      }
    }));
    const grown = heap() - before;
    console.log(`the heap grew by ${(grown / 1024 ** 2).toFixed(1)} MiB: ${ok} texts of 1 MiB stored, ${kept.length} streams open`);
    assert.ok(grown < 2 * max, `the heap grew by ${Math.round(grown / 1024 ** 2)} MiB with ${kept.length} streams open and ${ok} texts of 1 MiB stored`);
    assert.ok(ok >= 31, `at least as many texts as DB_STORED_SQL_MAX_BYTES holds were stored (${ok}): room is made by closing the heaviest repo's oldest streams`);
  } finally {
    await q.close();
  }
});
