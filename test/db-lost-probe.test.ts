// After a lost reply the pool probes whether the write committed; when the probe fails too (every executor killed, and
// its replacements as they start) the caller is told `committed: null`. A version that did commit then reached mirrors
// only at the database's next write, however long that was; it is now probed again in the background and reported as
// soon as an executor can answer. Both paths: an interactive COMMIT, and a write group.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { join } from 'node:path';
import { createClient } from '@libsql/client';
import { viaLoopback } from './helpers/loopback-fetch.ts';
import { executorPids, killNewExecutors } from './helpers/processes.ts';
import { startProduct, type Product } from './helpers/product.ts';
import { killAtVersion } from './helpers/lost-reply.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

let p: Product;
const receiver = new Receiver();

before(async () => {
  await receiver.start();
  p = await startProduct({ DB_QUEUE_TIMEOUT_MS: '1000', DB_MIRRORS: JSON.stringify([{ name: 'hook', url: receiver.url, secret: newSecret() }]) });
});
after(async () => {
  await p.close();
  await receiver.stop();
});

const BIG = 'INSERT INTO big WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 96) SELECT randomblob(262144) FROM n';

/**
 * Runs `commit` (a write of 24 MB to `database`, answered null when it was answered 200) while every executor is killed
 * the moment the database reaches the next version, and every replacement as it starts, until it is answered: its
 * reply and its probe are lost. The kill may come after the reply left (a 200): then the next version is tried.
 * Resolves with the version that committed under a failed probe, and the caller's error.
 */
async function loseReplyAndProbe(database: string, commit: () => Promise<string | null>): Promise<{ lost: number; error: string }> {
  for (let version = 2; version <= 5; version++) {
    const killing = killNewExecutors(); // the replacements die too: the probe is lost three times and fails
    try {
      const watcher = killAtVersion(join(p.dataDir, 'db', 'acme', 'web', `${database}.sqlite`), version, executorPids());
      const exited = once(watcher, 'exit');
      const error = await commit();
      await exited;
      if (error !== null) return { lost: version, error };
    } finally {
      killing.stop();
    }
  }
  assert.fail('no reply was lost');
}

/** The mirror has every version the database has, with no further write; before, it waited for the next one. */
async function reachesTheMirror(database: string, lost: number): Promise<void> {
  await waitFor(() => receiver.versions(database).includes(lost), 15_000, `version ${lost} at the mirror`);
  const now = await p.db('web', 'query', { database, sql: 'SELECT 1' });
  assert.equal(now.json.version, lost, 'it committed, and nothing was written since');
}

async function prepare(database: string): Promise<void> {
  assert.equal((await p.db('web', 'execute', { database, sql: 'CREATE TABLE big(x BLOB)' })).status, 200);
  await waitFor(() => receiver.versions(database).includes(1), 5000, 'the setup\'s event');
}

test('an interactive COMMIT whose reply and probe were both lost reaches the mirror once an executor answers', async (t) => {
  await prepare('unknown');
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/unknown/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  t.after(() => c.close());
  const { lost, error } = await loseReplyAndProbe('unknown', async () => {
    const tx = await c.transaction('write');
    await tx.execute(BIG);
    return tx.commit().then(() => null, (e: Error) => e.message);
  });
  assert.match(error, /the executor stopped during this transaction's commit; whether it committed is unknown/);
  await reachesTheMirror('unknown', lost);
});

test('a write whose reply and probe were both lost reaches the mirror once an executor answers', async () => {
  await prepare('unknown2');
  const { lost, error } = await loseReplyAndProbe('unknown2', async () => {
    const res = await p.db('web', 'execute', { database: 'unknown2', sql: BIG });
    return res.status === 200 ? null : res.text;
  });
  const body = JSON.parse(error);
  assert.equal(body.error.details.committed, null, error);
  await reachesTheMirror('unknown2', lost);
});
