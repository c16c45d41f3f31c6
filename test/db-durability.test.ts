// SPEC 4.5 durability: with DB_SYNC=full, a 200 from execute survives kill -9 of every process of the product,
// and no batch is ever half applied. Real processes, real files, real HTTP.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

test('every acknowledged write survives kill -9 of the whole product, and no batch is half applied', async () => {
  const dataDir = tempDir();
  const env = testEnv(dataDir, { DB_SYNC: 'full' });
  const secret = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');
  const auth = { authorization: `Bearer ${secret}` };
  let product = await spawnProduct(env);
  const db = (url: string, op: string, body: unknown) => call(url, 'localhost', `/web/_db/${op}`, { method: 'POST', body, headers: auth });
  try {
    const m = await db(product.url, 'migrate', { migrations: [{ id: '1', sql: 'CREATE TABLE a(k TEXT PRIMARY KEY); CREATE TABLE b(k TEXT PRIMARY KEY);' }] });
    assert.equal(m.status, 200, m.text);

    // 16 concurrent writers; each batch writes the same key into both tables.
    const acknowledged: string[] = [];
    let stop = false;
    const writer = async (w: number) => {
      for (let i = 0; !stop; i++) {
        const k = `w${w}-${i}`;
        try {
          const r = await db(product.url, 'execute', { statements: [{ sql: 'INSERT INTO a(k) VALUES (?)', params: [k] }, { sql: 'INSERT INTO b(k) VALUES (?)', params: [k] }] });
          if (r.status === 200) acknowledged.push(k);
        } catch {
          return; // connection reset by the kill
        }
      }
    };
    const writers = Array.from({ length: 16 }, (_, w) => writer(w));
    while (acknowledged.length < 300) await new Promise((r) => setTimeout(r, 10));
    product.killAll();
    stop = true;
    await Promise.all(writers);
    assert.ok(acknowledged.length >= 300);

    product = await spawnProduct(env);
    const a = await db(product.url, 'query', { sql: 'SELECT k FROM a' });
    const b = await db(product.url, 'query', { sql: 'SELECT k FROM b' });
    assert.equal(a.status, 200, a.text);
    const inA = new Set<string>(a.json.results[0].rows.map((r: string[]) => r[0]));
    const inB = new Set<string>(b.json.results[0].rows.map((r: string[]) => r[0]));
    const lost = acknowledged.filter((k) => !inA.has(k) || !inB.has(k));
    assert.deepEqual(lost, [], `${lost.length} of ${acknowledged.length} acknowledged writes were lost`);
    assert.deepEqual([...inA].sort(), [...inB].sort(), 'every batch is whole: both tables hold the same keys');

    // Versions stayed consistent with the change log across the crash.
    const status = await db(product.url, 'status', {});
    const changes = await db(product.url, 'changes', { since: status.json.version - 1 });
    assert.equal(changes.json.events.at(-1).version, status.json.version);
    const more = await db(product.url, 'execute', { sql: 'INSERT INTO a(k) VALUES (?)', params: ['after-restart'] });
    assert.equal(more.json.version, status.json.version + 1);
  } finally {
    try { product.killAll(); } catch { /* already gone */ }
    rmSync(dataDir, { recursive: true, force: true });
  }
});
