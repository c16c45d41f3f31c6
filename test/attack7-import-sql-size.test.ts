// Attack round 7: a SQL text past V8's longest string (2^29 − 24 characters) but within DB_MAX_SIZE_BYTES could not
// be read whole, and the import answered 400 sql_error quoting V8 ("Cannot create a string longer than 0x1fffffe8
// characters"), as if the SQL were wrong. It is 413 payload_too_large saying what to send instead; nothing is made.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
before(async () => {
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: '30000' });
});
after(() => p.close());

/** 545 MiB of SQL (one table, then comments), made as it is sent: no such file is written. */
async function* hugeDump(): AsyncGenerator<Buffer> {
  yield Buffer.from('CREATE TABLE a(x);\n');
  const line = Buffer.from(`-- ${'x'.repeat(1024 * 1024 - 4)}\n`);
  for (let i = 0; i < 545; i++) yield line;
}

test('a SQL text of more characters than one string holds: 413 naming the way out, and no database', async () => {
  const url = new URL('/web/_db/import?database=big&mode=create', p.url);
  const res = await request(url, {
    method: 'POST', body: Readable.from(hugeDump()),
    headers: { host: `acme.localhost:${url.port}`, authorization: `Bearer ${p.secret('acme', 'web')}`, 'content-type': 'application/sql' },
  });
  const text = await res.body.text();
  assert.equal(res.statusCode, 413, text);
  const { error } = JSON.parse(text);
  assert.equal(error.code, 'payload_too_large');
  assert.match(error.message, /application\/vnd\.sqlite3/);
  const status = await p.db('web', 'status', { database: 'big' });
  assert.equal(status.json.exists, false, status.text);
});
