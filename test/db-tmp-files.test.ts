// Files a repo's requests hold on the server's disk (DATA_DIR/tmp): imports being received, exports and snapshots
// being sent. Attack round 4: one repo's secret held as many as it opened connections, each up to DB_MAX_SIZE_BYTES.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request, type ClientRequest, type IncomingMessage } from 'node:http';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, type Product } from './helpers/product.ts';
import { MAX_FILES_PER_REPO } from '../src/db/service.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const port = () => Number(new URL(p.url).port);
const tmpFiles = () => readdirSync(join(p.dataDir, 'tmp')).filter((f) => /^(upload|export|snapshot)-/.test(f));

/** An import whose body is started and never finished: its upload file stays in DATA_DIR/tmp while it is open. */
function openImport(repo: string, database: string): ClientRequest {
  const req = request({
    host: '127.0.0.1', port: port(), method: 'POST', path: `/${repo}/_db/import?database=${database}&mode=create`,
    headers: { host: `acme.localhost:${port()}`, authorization: `Bearer ${p.secret('acme', repo)}`, 'content-type': 'application/vnd.sqlite3', 'transfer-encoding': 'chunked' },
  });
  req.on('error', () => {});
  req.write(Buffer.alloc(64 * 1024, 7));
  return req;
}

/** An export whose answer is never read past its headers: its file stays while the connection is open. */
function stalledExport(repo: string): Promise<{ res: IncomingMessage; req: ClientRequest }> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: '127.0.0.1', port: port(), method: 'POST', path: `/${repo}/_db/export`,
      headers: { host: `acme.localhost:${port()}`, authorization: `Bearer ${p.secret('acme', repo)}`, 'content-type': 'application/json' },
    }, (res) => {
      res.pause(); // read nothing: the file is sent only as far as the socket buffers take it
      resolve({ res, req });
    });
    req.on('error', reject);
    req.end('{}');
  });
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200 && !check(); i++) await new Promise((r) => setTimeout(r, 25));
  assert.ok(check(), what);
}

describe('files a repo holds on the server\'s disk', () => {
  test(`imports under way: at most ${MAX_FILES_PER_REPO} per repo, the next 503 before its body is stored; another repo is not held back`, async () => {
    const open = Array.from({ length: MAX_FILES_PER_REPO }, (_, i) => openImport('hog', `d${i}`));
    await until(() => tmpFiles().length >= MAX_FILES_PER_REPO, 'the open uploads are being received');
    const before = tmpFiles().length;
    const r = await p.call('/hog/_db/import?database=more&mode=create', {
      method: 'POST', rawBody: Buffer.alloc(1024, 1), headers: { authorization: `Bearer ${p.secret('acme', 'hog')}`, 'content-type': 'application/vnd.sqlite3' },
    });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error.code, 'unavailable');
    assert.equal(r.headers['retry-after'], '1');
    assert.equal(r.json.error.details.committed, false);
    assert.equal(tmpFiles().length, before, 'no file was made for the refused upload');
    // Another repo's import goes on (a bad file: 400 from the check, not 503).
    const other = await p.call('/calm/_db/import?database=x&mode=create', {
      method: 'POST', rawBody: Buffer.from('not a database'), headers: { authorization: `Bearer ${p.secret('acme', 'calm')}`, 'content-type': 'application/vnd.sqlite3' },
    });
    assert.equal(other.status, 400, other.text);
    // Uploads that end (here: cut off) give their slots back.
    for (const req of open) req.destroy();
    await until(() => tmpFiles().length === 0, 'the cut-off uploads are removed');
    const again = await p.call('/hog/_db/import?database=more&mode=create', {
      method: 'POST', rawBody: Buffer.from('not a database'), headers: { authorization: `Bearer ${p.secret('acme', 'hog')}`, 'content-type': 'application/vnd.sqlite3' },
    });
    assert.equal(again.status, 400, again.text);
  });

  test('exports nobody reads hold their files: the next export or snapshot of the repo is 503 until they are gone', async () => {
    // Bigger than what loopback socket buffers take, so an unread export stays under way.
    let r = await p.db('big', 'execute', { sql: 'CREATE TABLE t(b BLOB)' });
    assert.equal(r.status, 200, r.text);
    for (let i = 0; i < 4; i++) {
      r = await p.db('big', 'execute', { sql: 'WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 8) INSERT INTO t SELECT randomblob(1000000) FROM c' });
      assert.equal(r.status, 200, r.text);
    }
    const stalled = [];
    for (let i = 0; i < MAX_FILES_PER_REPO; i++) stalled.push(await stalledExport('big'));
    for (const op of ['export', 'snapshot']) {
      r = await p.db('big', op, {});
      assert.equal(r.status, 503, `${op}: ${r.text.slice(0, 200)}`);
      assert.equal(r.json.error.code, 'unavailable');
    }
    // The readers leave: their files go, and so do their slots.
    for (const s of stalled) s.req.destroy();
    await until(() => tmpFiles().length === 0, 'the unread exports are removed');
    r = await p.db('big', 'snapshot', {});
    assert.equal(r.status, 200, r.text.slice(0, 200));
    assert.ok(Number(r.headers['content-length']) > 30_000_000);
  });
});
