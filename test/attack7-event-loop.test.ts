// Attack round 7: texts a caller sends are read on the main process's event loop (request checks, the libSQL
// pipeline's reading of statements, a header): one crafted request must not hold it, or every org's requests wait.
// Each case was quadratic (a pattern tried at every `;`, two runs of spaces trading characters) or 4–30× slower per
// character than it needed to be; a quiet org's status is timed back to back while the crafted request runs.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { rmSync } from 'node:fs';
import { ROOT_KEY, spawnProduct, tempDir, testEnv, type HttpResult, type SpawnedProduct } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { rawDb, whileQuietWaits as quietWaits } from './helpers/quiet-org.ts';

// A process of its own: the test's own work (bodies of 30 MB) must not be what holds the loop measured.
let p: SpawnedProduct;
const dataDir = tempDir();
before(async () => {
  p = await spawnProduct(testEnv(dataDir, { DB_QUERY_TIMEOUT_MS: '2000' }));
});
after(() => {
  p.killAll();
  rmSync(dataDir, { recursive: true, force: true });
});

/** POST /{repo}/_db/{op} of org `org` with a body already serialized (made before any timing starts). */
const db = (org: string, repo: string, op: string, body: Buffer): Promise<HttpResult> => rawDb(p.url, org, repo, op, body);

const whileQuietWaits = <T>(attack: () => Promise<T>) => quietWaits(p.url, attack);

const pipeline = (requests: unknown[]): Promise<HttpResult & { worstMs: number }> => {
  const body = Buffer.from(JSON.stringify({ requests }));
  return whileQuietWaits(() => db('acme', 'web', 'v2/pipeline', body)).then(({ result, worstMs }) => Object.assign(result, { worstMs }));
};
const execute = (sql: string) => pipeline([{ type: 'execute', stmt: { sql } }, { type: 'close' }]);
/** A Hrana result's first entry: ok with its response, or the error. */
const first = (r: HttpResult) => r.json.results[0];

/** Bytes that only a socket sends as they are (a header value of U+00A0, which undici would refuse to send). */
function rawRequest(head: Buffer, body: string): Promise<{ status: number; body: string }> {
  const { port } = new URL(p.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () => socket.write(Buffer.concat([head, Buffer.from(`\r\n\r\n${body}`)])));
    let text = '';
    socket.setEncoding('latin1');
    socket.on('data', (d) => {
      text += d;
      const [headers, rest] = text.split('\r\n\r\n');
      const length = /content-length: (\d+)/i.exec(headers ?? '');
      if (rest !== undefined && length && Buffer.byteLength(rest, 'latin1') >= Number(length[1])) {
        socket.destroy();
        resolve({ status: Number(text.split(' ')[1]), body: rest });
      }
    });
    socket.on('error', reject);
    socket.on('close', () => reject(new Error(`the connection closed without a whole answer: ${JSON.stringify(text.slice(0, 300))}`)));
    socket.setTimeout(10_000, () => socket.destroy());
  });
}

const LIMIT_MS = 1000;

describe('a crafted libSQL statement does not hold the event loop', () => {
  test('a batch step of `;/*` repeated before BEGIN … COMMIT (read for PRAGMA foreign_keys=OFF: quadratic: 6 s for 180 KB)', async () => {
    const steps = [{ stmt: { sql: `SELECT 1${';/*'.repeat(60_000)}` } }, { stmt: { sql: 'BEGIN' } }, { stmt: { sql: 'COMMIT' }, condition: { type: 'ok', step: 1 } }];
    const result = await pipeline([{ type: 'batch', batch: { steps } }, { type: 'close' }]);
    assert.equal(result.status, 200, result.text);
    assert.equal(first(result).type, 'ok', result.text.slice(0, 300));
    assert.ok(result.worstMs < LIMIT_MS, `another org waited ${Math.round(result.worstMs)} ms`);
  });

  for (const [name, sql] of [
    ['PRAGMA foreign_keys=ON, then spaces and more (read as the stream\'s foreign_keys pragma)', `PRAGMA foreign_keys=ON${' '.repeat(60_000)}x`],
    ['ROLLBACK, then spaces and more (read as the stream\'s ROLLBACK)', `ROLLBACK${' '.repeat(60_000)}x`],
    ['PRAGMA, spaces, then = (read as a pragma that only reads)', `PRAGMA${' '.repeat(60_000)}=`],
  ]) {
    test(`${name}: quadratic, 8–24 s for 60 KB`, async () => {
      const result = await execute(sql!);
      assert.equal(result.status, 200, result.text);
      assert.equal(first(result).type, 'error', 'SQLite or the stream refuses it, after reading it once');
      assert.ok(result.worstMs < LIMIT_MS, `another org waited ${Math.round(result.worstMs)} ms`);
    });
  }
});

test('a 30 MB statement to /_db/query is checked for a second statement as fast as its JSON is parsed (it took 10 times as long: 2–3 s)', async () => {
  const body = Buffer.from(JSON.stringify({ sql: `SELECT 1 IN (${'1,'.repeat(14_000_000)}1)` }));
  // The same machine's pace (other work shares it): what parsing this JSON alone takes here, now.
  const t = performance.now();
  JSON.parse(body.toString());
  const parseMs = performance.now() - t;
  const { result, worstMs } = await whileQuietWaits(() => db('acme', 'web', 'query', body));
  assert.notEqual(result.status, 500, result.text);
  assert.ok(worstMs < Math.max(1.5 * LIMIT_MS, 6 * parseMs), `another org waited ${Math.round(worstMs)} ms (parsing the body: ${Math.round(parseMs)} ms)`);
});

// /logout (how it was found, with no credentials) no longer reads a body at all; a database request still checks it.
test('a Content-Encoding of 16 KB of U+00A0 does not hold the event loop (a second per request)', async () => {
  const auth = `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}`;
  const head = Buffer.concat([
    Buffer.from(`POST /web/_db/execute HTTP/1.1\r\nHost: acme.localhost\r\nAuthorization: ${auth}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Encoding: `, 'latin1'),
    Buffer.alloc(16_000, 0xa0), Buffer.from('x', 'latin1'),
  ]);
  const { result, worstMs } = await whileQuietWaits(async () => {
    const answers = await Promise.all([1, 2, 3].map(() => rawRequest(head, '{}')));
    return answers[0]!;
  });
  assert.equal(result.status, 400, result.body);
  assert.match(result.body, /Content-Encoding this server does not decode/);
  assert.ok(worstMs < LIMIT_MS, `another org waited ${Math.round(worstMs)} ms`);
});
