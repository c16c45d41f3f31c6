// Import's time budget (SPEC 4.12): the check and copy of an upload get time by its size, so a small crafted file
// (CHECK constraints costly per row, or cheap statements that add up) cannot hold an executor for minutes.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { rowsOf, upload } from './helpers/imports.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

// 1 s, not less: the honest import after the refused one must fit its 2-s budget on a machine at load 14.
const QUERY_TIMEOUT_MS = 1000;
/** What the budget is for an upload of `bytes`: twice the statement limit plus a second per MiB. */
const budgetOf = (bytes: number) => 2 * QUERY_TIMEOUT_MS + Math.ceil((bytes / 2 ** 20) * 1000);

describe('import time budget', () => {
  let p: Product;
  let dir: string;
  before(async () => {
    p = await startProduct({ DB_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS) });
    dir = tempDir('scopebase-import-budget-');
  });
  after(async () => {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a small file whose CHECK constraints cost much per row is stopped at its size\'s budget: 422, nothing made', async () => {
    const path = join(dir, 'costly.sqlite');
    const db = openSqlite(path);
    // ~2 ms a row to check, 6,000 rows in ~70 KB: ~12 s of integrity check and copy, far past the ~2-s budget.
    db.exec("CREATE TABLE t(x INTEGER CHECK (length(replace(hex(zeroblob(100000)), '0', 'ab')) > x))");
    db.exec('PRAGMA ignore_check_constraints=ON');
    db.exec('INSERT INTO t WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 6000) SELECT x FROM c');
    db.close();
    const bytes = readFileSync(path);
    assert.ok(bytes.length < 128 * 1024, `premise: a small file (${bytes.length} bytes)`);
    const r = await upload(p, 'web', 'database=costly', bytes);
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.error.code, 'query_timeout');
    assert.match(r.json.error.message, /^checking and installing the import ran past \d+ ms, the time an upload of [\d.]+ KiB is given \(twice DB_QUERY_TIMEOUT_MS plus 1 s per MiB/);
    assert.deepEqual(r.json.error.details, { budgetMs: budgetOf(bytes.length), bytes: bytes.length });
    assert.equal((await p.db('web', 'status', { database: 'costly' })).json.exists, false, 'all or nothing: no database left');
    // The executor it held is free again: an honest file of the same size imports.
    const honest = join(dir, 'honest.sqlite');
    const h = openSqlite(honest);
    h.exec("CREATE TABLE t(x INTEGER CHECK (x > 0)); INSERT INTO t WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) SELECT x FROM c");
    h.close();
    const ok = await upload(p, 'web', 'database=honest', readFileSync(honest));
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json.tables, [{ name: 't', rows: 2000 }]);
  });

  test('SQL text of cheap statements, each under the statement limit, is stopped once their sum passes the budget', async () => {
    // ~30 ms each, 200 of them from ~20 KB: 6 s in all, far past the 2 s this text is given.
    const step = 'INSERT INTO t SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 100000) SELECT x FROM c);';
    const text = `CREATE TABLE t(n);\n${Array.from({ length: 200 }, () => step).join('\n')}\n`;
    const r = await upload(p, 'web', 'database=adds_up', text, 'application/sql');
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.error.code, 'query_timeout');
    assert.match(r.json.error.message, /^checking and installing the import ran past/, 'the import\'s budget, not one statement\'s limit');
    assert.equal(r.json.error.details.budgetMs, budgetOf(Buffer.byteLength(text)));
    assert.equal((await p.db('web', 'status', { database: 'adds_up' })).json.exists, false);
    assert.deepEqual(await rowsOf(p, 'web', 'SELECT count(*) FROM t', 'honest'), [[2000]], 'the repo is served');
  });
});
