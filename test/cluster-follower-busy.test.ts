// A follower that refuses a shipment for a moment (503 with Retry-After, nothing applied: here its connection cap,
// full of requests in flight) is sent it again within the write's wait (strict durability): before, the write,
// committed on the primary, was answered 503 `committed: null` although a retry a moment later was confirmed. A
// follower refusing for longer still ends in that 503, within a bounded wait, and gets the write later (reshipLater).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { proxyToken } from '../src/db/remote.ts';
import { clusterForSuite, eventIds, type TestCluster } from './helpers/cluster.ts';
import { waitFor } from './helpers/mirror.ts';
import { partial } from './helpers/partial-body.ts';

const ORG = 'acme';
const REPO = 'web';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster: a follower refusing for a moment still confirms a strict write', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 2, ttlS: 2, env: { MAX_CONNECTIONS: '6' } }, (c) => (cluster = c));

  /** Fills `url`'s connection cap with requests whose bodies never come (its idle ones, the shipper's, closed to make room). */
  const fillConnections = async (url: string) => {
    const token = proxyToken(cluster.proxy.config.rootKeys[0]!);
    const held = [];
    for (let i = 0; i < 20; i++) {
      const h = partial(url, [
        `POST /${REPO}/_db/execute HTTP/1.1`, 'host: node', `x-scopebase-org: ${ORG}`, `x-scopebase-proxy-token: ${token}`,
        `authorization: Bearer ${cluster.proxy.secret(ORG, REPO)}`, 'content-type: application/json', 'content-length: 100', '', '',
      ].join('\r\n'), 1, 6000);
      held.push(h);
      // Refused (503 at once): the cap is full of held requests, none idle.
      if ((await Promise.race([h.answer, sleep(300).then(() => 'held')])) !== 'held') return held;
    }
    throw new Error('the connection cap was never reached');
  };

  /** Writes to `main` with its follower's connections full; they are let go `releaseMs` after the write was sent. */
  const writeWhileFull = async (value: number, releaseMs: number) => {
    const main = (await cluster.placement(ORG, REPO, 'main'))!;
    const held = await fillConnections(cluster.node(main.follower!).url);
    const at = performance.now();
    const release = sleep(releaseMs).then(() => held.forEach((h) => h.socket.destroy()));
    try {
      const write = await cluster.proxy.db(REPO, 'execute', { sql: `INSERT INTO t VALUES (${value})` });
      return { write, ms: performance.now() - at, main };
    } finally {
      await release;
    }
  };

  test('the follower refuses for half a second: the write is answered 200 and the follower holds it', async () => {
    const create = await cluster.proxy.db(REPO, 'execute', { sql: 'CREATE TABLE t (v)' });
    assert.equal(create.status, 200, create.text);
    const { write, main } = await writeWhileFull(1, 500);
    assert.equal(write.status, 200, write.text);
    assert.ok(eventIds(cluster.node(main.follower!), ORG, REPO, 'main').has(write.json.version), 'the follower holds the acknowledged write');
  });

  test('the follower refuses for longer: 503 `committed: null` within a bounded wait, and the follower gets the write later', async () => {
    const { write, ms, main } = await writeWhileFull(2, 5000);
    assert.equal(write.status, 503, write.text);
    assert.equal(write.json.error.details.committed, null, write.text);
    assert.match(write.json.error.message, /follower answered 503 unavailable, still after 2000 ms of retries/);
    // The retries' bound (2 s) and the refusals' answers; the follower refuses for 5 s.
    assert.ok(ms < 4500, `the write waited ${Math.round(ms)} ms`);
    const committed = Math.max(...eventIds(cluster.node(main.primary), ORG, REPO, 'main').keys());
    await waitFor(async () => {
      await sleep(100);
      return eventIds(cluster.node(main.follower!), ORG, REPO, 'main').has(committed);
    }, 15_000, 'the write on the follower once it takes connections again');
  });
});
