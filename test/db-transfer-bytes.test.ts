// Bytes that a JavaScript string cannot hold, through export and import (SPEC 4.12) and SQL text (SPEC 4.8): TEXT
// that is not valid UTF-8 comes back byte for byte or is refused, never turned into U+FFFD; a blob literal over
// DB_MAX_VALUE_BYTES is refused (SQLite itself would store NULL for it without a word).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { request } from 'undici';
import { startProduct, tempDir, type Product } from './helpers/product.ts';
import { rowsOf, upload } from './helpers/imports.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const MAX_VALUE = 64 * 1024;

describe('bytes through export and import', () => {
  let p: Product;
  let dir: string;
  const exportSql = async (database: string) => {
    const res = await request(`${p.url}/web/_db/export`, {
      method: 'POST', body: JSON.stringify({ database, format: 'sql' }),
      headers: { host: `acme.${p.config.baseDomain}`, authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/json' },
    });
    assert.equal(res.statusCode, 200);
    return Buffer.from(await res.body.arrayBuffer());
  };
  before(async () => {
    p = await startProduct({ DB_MAX_VALUE_BYTES: String(MAX_VALUE) });
    dir = tempDir('scopebase-bytes-');
  });
  after(async () => {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('TEXT that is not valid UTF-8 (from an imported file) exports as SQL that loads back byte for byte', async () => {
    const path = join(dir, 'bytes.sqlite');
    const local = openSqlite(path);
    local.exec(`CREATE TABLE t(id INTEGER PRIMARY KEY, x);
      INSERT INTO t VALUES (1, CAST(x'ff80' AS TEXT)), (2, CAST(x'eda0bd' AS TEXT)), (3, 'ok ''quoted'' é'), (4, CAST(x'61006200ff' AS TEXT)), (5, x'ff80'), (6, 'real U+FFFD: ' || char(65533))`);
    local.close();
    const made = await upload(p, 'web', 'database=bytes', readFileSync(path));
    assert.equal(made.status, 200, made.text);
    const want = await rowsOf(p, 'web', 'SELECT id, typeof(x), hex(x) FROM t ORDER BY id', 'bytes');
    const dump = await exportSql('bytes');
    assert.equal(Buffer.from(dump.toString('utf8'), 'utf8').equals(dump), true, 'the dump is valid UTF-8 text');
    // sqlite3 loads it to the same bytes, and so does import.
    writeFileSync(join(dir, 'dump.sql'), dump);
    const loaded = join(dir, 'loaded.sqlite');
    execFileSync('sh', ['-c', `sqlite3 '${loaded}' < '${join(dir, 'dump.sql')}'`]);
    const again = openSqlite(loaded, { readOnly: true });
    assert.deepEqual(again.prepare('SELECT id, typeof(x), hex(x) FROM t ORDER BY id').all().map((r) => Object.values(r)), want);
    again.close();
    const back = await upload(p, 'web', 'database=bytesback', dump, 'application/sql');
    assert.equal(back.status, 200, back.text);
    assert.deepEqual(await rowsOf(p, 'web', 'SELECT id, typeof(x), hex(x) FROM t ORDER BY id', 'bytesback'), want);
  });

  test('SQL text that is not valid UTF-8 is refused saying where, not loaded with U+FFFD in place of its bytes', async () => {
    const dump = Buffer.concat([Buffer.from("CREATE TABLE t(x);\nINSERT INTO t VALUES('ok');\nINSERT INTO t VALUES('"), Buffer.from([0xff, 0x80]), Buffer.from("');\n")]);
    const r = await upload(p, 'web', 'database=badtext', dump, 'application/sql');
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_request');
    assert.match(r.json.error.message, /not valid UTF-8.*line 3/);
    assert.equal((await p.db('web', 'status', { database: 'badtext' })).json.exists, false, 'nothing was made');
    const file = join(dir, 'bytes.sqlite');
    const sent = await upload(p, 'web', 'database=badtext', readFileSync(file), 'application/sql');
    assert.equal(sent.status, 400, sent.text);
    assert.match(sent.json.error.message, /a SQLite database file.*application\/vnd\.sqlite3/);
    const zipped = await upload(p, 'web', 'database=badtext', gzipSync(dump), 'application/sql');
    assert.equal(zipped.status, 400, zipped.text);
    assert.match(zipped.json.error.message, /gzip-compressed: decompress it/);
  });

  test('a blob literal over DB_MAX_VALUE_BYTES is 507, in SQL text and in execute, never stored as NULL', async () => {
    const literal = `X'${'ab'.repeat(MAX_VALUE + 1)}'`;
    const text = `CREATE TABLE b(x);\nINSERT INTO b VALUES(${literal});\n`;
    const r = await upload(p, 'web', 'database=bigblob', text, 'application/sql');
    assert.equal(r.status, 507, r.text);
    assert.match(r.json.error.message, /statement 1 of the SQL text: .*blob literal/);
    assert.equal((await p.db('web', 'status', { database: 'bigblob' })).json.exists, false);
    const made = await p.db('web', 'execute', { database: 'blobs', statements: [{ sql: 'CREATE TABLE b(x)' }, { sql: `INSERT INTO b VALUES(${literal})` }] });
    assert.equal(made.status, 507, made.text);
    assert.equal(made.json.error.details.statement, 1);
    // At the limit it goes in whole.
    const fits = await p.db('web', 'execute', { database: 'blobs', statements: [{ sql: 'CREATE TABLE b(x)' }, { sql: `INSERT INTO b VALUES(X'${'ab'.repeat(MAX_VALUE)}')` }] });
    assert.equal(fits.status, 200, fits.text);
    assert.deepEqual(await rowsOf(p, 'web', 'SELECT length(x) FROM b', 'blobs'), [[MAX_VALUE]]);
    const read = await p.db('web', 'query', { database: 'blobs', sql: `SELECT ${literal} IS NULL` });
    assert.equal(read.status, 507, read.text);
  });
});
