// Replication is the product's own traffic (docs/security.md, "Request bodies"): a follower node whose budget of
// bodies in flight holds an org's whole share (its users' uploads, held open) still takes that org's replication, so
// the org's writes on the primary are answered 200, not 503 with `committed: null` (committed, but unconfirmed).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { proxyToken } from '../src/db/remote.ts';
import { clusterForSuite, eventIds, type TestCluster } from './helpers/cluster.ts';
import { partial } from './helpers/partial-body.ts';

const ORG = 'acme';
const MIB = 1024 * 1024;

describe('cluster: replication is not held to an org\'s share of the body budget', () => {
  let cluster: TestCluster;
  // A repo's share is 1 MiB (a quarter), an org's 2 MiB (half): two held bodies of 1 MiB in two repos fill the org's.
  clusterForSuite({ nodes: 2, ttlS: 2, env: { DB_MAX_BODY_BYTES: String(MIB), MAX_BODY_BYTES_IN_FLIGHT: String(4 * MIB) } }, (c) => (cluster = c));

  const inFlight = async (id: string): Promise<number> => {
    const proc = cluster.node(id).proc!;
    const admin = /\(admin (http:\/\/[^)]+)\)/.exec(proc.stdout() + proc.stderr())![1]!;
    const text = await (await fetch(`${admin}/metrics`)).text();
    return Number(/^scopebase_request_body_bytes_in_flight (\d+)/m.exec(text)?.[1] ?? 0);
  };

  test('with the org\'s share full on the follower, a write to another of its repos is replicated and answered 200', async () => {
    const create = await cluster.proxy.db('web', 'execute', { sql: 'CREATE TABLE t (v)' });
    assert.equal(create.status, 200, create.text);
    const p = (await cluster.placement(ORG, 'web', 'main'))!;
    assert.ok(p.follower !== null, JSON.stringify(p));
    const follower = cluster.node(p.follower);

    // The org's users hold two 1 MiB bodies open on the follower node (the proxy's way in: its token, the repo secret).
    const token = proxyToken(cluster.proxy.config.rootKeys[0]!);
    const held = ['a1', 'a2'].map((repo) => partial(follower.url, [
      `POST /${repo}/_db/execute HTTP/1.1`, 'host: node', `x-scopebase-org: ${ORG}`, `x-scopebase-proxy-token: ${token}`,
      `authorization: Bearer ${cluster.proxy.secret(ORG, repo)}`, 'content-type: application/json', `content-length: ${MIB}`, '', '',
    ].join('\r\n'), 1, 30_000));
    try {
      // Both bodies are reserved before the write is sent (their headers admitted: the org's 2 MiB held).
      // The node's own bodies come and go beside them (a shipper's /_cluster/state, 2 bytes, once in 2 runs): waited out.
      let bytes = 0;
      for (let i = 0; i < 200 && (bytes = await inFlight(follower.id)) !== 2 * MIB; i++) await new Promise((r) => setTimeout(r, 50));
      assert.equal(bytes, 2 * MIB, 'the org\'s share is held on the follower');

      const write = await cluster.proxy.db('web', 'execute', { sql: 'INSERT INTO t VALUES (1)' });
      assert.equal(write.status, 200, write.text);
      assert.ok(eventIds(follower, ORG, 'web', 'main').has(write.json.version), 'the follower holds the acknowledged write');
    } finally {
      for (const h of held) h.socket.destroy();
    }
  });
});
