// A mirror that fails, as its operator sees it through the product: what status says, and how soon delivery resumes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct } from './helpers/product.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

const mirrorsEnv = (url: string) => JSON.stringify([{ name: 'replica', url, secret: newSecret() }]);

test('a mirror\'s reply with terminal colours and links shows in status as its words only, no escape fragments', async (t) => {
  const receiver = await new Receiver().start();
  const p = await startProduct({ DB_MIRRORS: mirrorsEnv(receiver.url), DB_MIRROR_MAX_BACKOFF_MS: '100' });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  // What a framework's development error page or a colouring logger in front of the hook may answer.
  receiver.behaviour = (_req, res) => void res.writeHead(503).end('\x1b[1;31mdown\x1b[0m for \x1b]8;;https://status.example\x07maintenance\x1b]8;;\x07\r\n');
  await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors[0].lastError !== null, 5000, 'a failure');
  assert.equal((await p.db('web', 'status', {})).json.mirrors[0].lastError, 'HTTP 503: down for maintenance');
});

test('a mirror back from an outage gets the next write at once, and the other databases\' waiting events with it, not after each one\'s backoff', async (t) => {
  const receiver = await new Receiver().start();
  const port = receiver.port;
  await receiver.stop();
  // Stalled from the second failure on (10 ms): retried every 10–20 s, as a long outage's lanes are at the 60 s default.
  const p = await startProduct({ DB_MIRRORS: mirrorsEnv(`http://127.0.0.1:${port}/hook`), DB_MIRROR_MAX_BACKOFF_MS: '20000', DB_MIRROR_STALL_AFTER_MS: '10' });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  const failures = async () => {
    const text = await (await fetch(`${p.running.adminUrl}/metrics`)).text();
    return Number(/^scopebase_mirror_delivery_failures_total\{mirror="replica",kind="network"\} (\d+)/m.exec(text)?.[1] ?? 0);
  };
  const before = await failures();
  for (const database of ['a', 'b']) await p.db('web', 'execute', { database, sql: 'CREATE TABLE t (v)' });
  await waitFor(async () => (await failures()) - before >= 4, 20_000, 'two failed attempts per database: both at the capped interval now'); // ~2 s on a quiet machine
  await receiver.start(port);
  const back = performance.now();
  assert.equal((await p.db('web', 'execute', { database: 'a', sql: "INSERT INTO t VALUES ('after')" })).json.version, 2);
  const seen: Record<string, number> = {};
  await waitFor(() => {
    for (const [database, version] of [['a', 2], ['b', 1]] as const) if (receiver.versions(database).includes(version)) seen[database] ??= performance.now() - back;
    return Object.keys(seen).length === 2;
  }, 25_000, 'both databases delivered');
  t.diagnostic(`after the mirror came back: a's new write delivered in ${Math.round(seen.a!)} ms, b's waiting event in ${Math.round(seen.b!)} ms`);
  assert.deepEqual(receiver.versions('a'), [1, 2]);
  assert.ok(seen.a! < 2000 && seen.b! < 2000, `delivered ${Math.round(seen.a!)} / ${Math.round(seen.b!)} ms after the mirror came back`);
});
