// Large requests and replies cross to the executors as one frame each (src/db/executor/protocol.ts): a frame arriving
// in many chunks is joined once, not once per chunk. Joined per chunk, a 24 MB execute (three 6 MB blobs, inside
// every limit) spent its whole DB_QUERY_TIMEOUT_MS copying and got 422 query_timeout with no statement run.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { startProduct, type Product } from './helpers/product.ts';
import { encodeFrame, FrameDecoder } from '../src/db/executor/protocol.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(async () => {
  await p.close();
});

test('a frame that arrives in many chunks is joined once: the bytes copied stay linear in its size', () => {
  const body = randomBytes(8 * 1024 * 1024);
  const wire = Buffer.concat([encodeFrame(1, { op: 'x' }, body), encodeFrame(2, { op: 'y' }, 'tail')]);
  const concat = Buffer.concat;
  let copied = 0;
  Buffer.concat = ((list: readonly Uint8Array[], total?: number) => {
    const out = concat(list, total);
    copied += out.length;
    return out;
  }) as typeof Buffer.concat;
  const frames = [];
  try {
    const decoder = new FrameDecoder();
    for (let off = 0; off < wire.length; off += 65536) frames.push(...decoder.push(wire.subarray(off, off + 65536)));
  } finally {
    Buffer.concat = concat;
  }
  assert.deepEqual(frames.map((f) => f.seq), [1, 2]);
  assert.equal(frames[0]!.body.equals(body), true);
  assert.equal(frames[1]!.body.toString(), 'tail');
  assert.ok(copied <= 2 * wire.length, `copied ${copied} bytes for a ${wire.length}-byte stream`);
});

test('a 24 MB execute of three 6 MB blobs commits (it got 422 query_timeout) and reads back', async () => {
  const blobs = [0, 1, 2].map(() => randomBytes(6_000_000).toString('base64'));
  const r = await p.db('web', 'execute', {
    statements: [{ sql: 'CREATE TABLE b(x)' }, ...blobs.map(($blob) => ({ sql: 'INSERT INTO b VALUES (?)', params: [{ $blob }] }))],
  });
  assert.equal(r.status, 200, r.text.slice(0, 300));
  for (const [i, blob] of blobs.entries()) { // one a request: the three together are over DB_MAX_RESULT_BYTES
    const read = await p.db('web', 'query', { sql: 'SELECT x FROM b WHERE rowid = ?', params: [i + 1] });
    assert.equal(read.status, 200, read.text.slice(0, 300));
    assert.equal(read.json.results[0].rows[0][0].$blob, blob);
  }
});
