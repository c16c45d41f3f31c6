// A first write that creates its database and loses its executor before it commits leaves no database: the probe sent
// then removes the file (still at version 0). When that probe is lost too (every executor killed, and each replacement
// as it started), the caller is told `committed: null` and the probe is asked again in the background; that re-probe
// never removed the file, so status said the database existed, empty, for good. It now runs in the database's write
// lane and removes it, as the first probe would have, unless a later write used the file meanwhile. So for a libSQL
// transaction that was creating its database.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { executorPids, killNewExecutors } from './helpers/processes.ts';
import { waitFor } from './helpers/mirror.ts';
import { pause } from './helpers/runaway.ts';

/** Seconds of work before its commit: killed while it runs. */
const LONG_FIRST_WRITE = [
  { sql: 'CREATE TABLE t(x)' },
  { sql: 'INSERT INTO t SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000) SELECT x FROM c)' },
];

let p: Product;
before(async () => {
  p = await startProduct({ DB_QUERY_TIMEOUT_MS: '60000', DB_QUEUE_TIMEOUT_MS: '1000' });
});
after(() => p.close());

const fileOf = (database: string) => join(p.dataDir, 'db', 'acme', 'web', `${database}.sqlite`);

/**
 * Runs `send` (a first write to `database`, resolving with how it was answered) and kills every executor while it runs,
 * and each replacement until it is answered: its probe is lost too.
 */
async function loseFirstWrite(database: string, send: () => Promise<void> = () => sendLong(database)): Promise<void> {
  const sent = send();
  await waitFor(() => existsSync(fileOf(database)), 10_000, 'the file the first write makes');
  await pause(300);
  const killing = killNewExecutors(); // the probe's executors die too: it fails
  try {
    for (const pid of executorPids()) process.kill(pid, 'SIGKILL');
    await sent;
    assert.equal(existsSync(fileOf(database)), true, 'the file is left until an executor can answer');
  } finally {
    killing.stop();
  }
}

async function sendLong(database: string): Promise<void> {
  const res = await p.db('web', 'execute', { database, statements: LONG_FIRST_WRITE });
  assert.equal(res.status, 503, res.text);
  assert.equal(res.json.error.details.committed, null, res.text);
}

test('a first write whose reply and probe were both lost leaves no database once an executor answers (status said it existed, empty)', async () => {
  await loseFirstWrite('fresh');
  await waitFor(() => !existsSync(fileOf('fresh')), 15_000, 'the file removed by the re-probe');
  const status = await p.db('web', 'status', { database: 'fresh' });
  assert.equal(status.status, 200, status.text);
  assert.equal(status.json.exists, false, status.text);
  assert.ok(!status.json.databases.includes('fresh'), status.text);
  // It can be made again: nothing of the lost write is left.
  const again = await p.db('web', 'execute', { database: 'fresh', sql: 'CREATE TABLE t(x)' });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.json.version, 1, again.text);
});

test('a later write that used the file before the re-probe keeps it (the database exists from then on)', async () => {
  await loseFirstWrite('kept');
  // Sent at once: it runs in the lane before the re-probe (1 s later), on the file the lost write left at version 0.
  const later = await p.db('web', 'execute', { database: 'kept', sql: 'SELECT 1' });
  assert.equal(later.status, 200, later.text);
  await pause(3000); // the re-probe has answered
  const status = await p.db('web', 'status', { database: 'kept' });
  assert.equal(status.json.exists, true, status.text);
});

test('a libSQL transaction creating its database, lost with its process and its probe, leaves no database once an executor answers', async () => {
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/txfresh/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  try {
    await loseFirstWrite('txfresh', async () => {
      const tx = await c.transaction('write');
      try {
        await tx.execute(LONG_FIRST_WRITE[0]!.sql);
        await assert.rejects(tx.execute(LONG_FIRST_WRITE[1]!.sql), /executor process exited/);
      } finally {
        tx.close();
      }
    });
  } finally {
    c.close();
  }
  await waitFor(() => !existsSync(fileOf('txfresh')), 15_000, 'the file removed by the re-probe');
  const status = await p.db('web', 'status', { database: 'txfresh' });
  assert.equal(status.json.exists, false, status.text);
});
