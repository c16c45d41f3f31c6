// Cluster configuration (docs/scaling.md): no CLUSTER_ variable is one node as before; bad values are refused at
// start with the variable's name; what a node does not replicate yet (time travel) is refused there.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../src/shared/config.ts';
import { tempDir, testEnv } from './helpers/product.ts';

const node = { CLUSTER_ETCD: 'http://127.0.0.1:2379,http://10.0.0.2:2379', CLUSTER_NODE_ID: 'db-1', CLUSTER_ADVERTISE_URL: 'http://10.0.0.1:9000' };

test('no cluster variables: one node, as before (history on by default)', () => {
  const config = loadConfig(testEnv(tempDir()));
  assert.equal(config.cluster, null);
  assert.equal(config.db.historyDays, 7);
});

test('a node: endpoints, id, advertised URL, lease TTL (10 s by default); history off by default', () => {
  const config = loadConfig(testEnv(tempDir(), node));
  assert.deepEqual(config.cluster, { etcd: ['http://127.0.0.1:2379', 'http://10.0.0.2:2379'], nodeId: 'db-1', advertiseUrl: 'http://10.0.0.1:9000', leaseTtlS: 10, durability: 'strict' });
  assert.equal(config.db.historyDays, 0);
  assert.equal(loadConfig(testEnv(tempDir(), { CLUSTER_ETCD: 'http://127.0.0.1:2379' })).cluster?.nodeId, null, 'a proxy needs only the endpoints');
});

test('bad values name their variable', () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ CLUSTER_NODE_ID: 'db-1' }, /^CLUSTER_ETCD: CLUSTER_NODE_ID and CLUSTER_ADVERTISE_URL need the etcd endpoints too/],
    [{ ...node, CLUSTER_ETCD: 'etcd:2379' }, /^CLUSTER_ETCD: each endpoint must be http\(s\):\/\/host:port, got "etcd:2379"/],
    [{ ...node, CLUSTER_NODE_ID: 'DB 1' }, /^CLUSTER_NODE_ID: must be 1-63 lowercase letters/],
    [{ CLUSTER_ETCD: node.CLUSTER_ETCD, CLUSTER_NODE_ID: 'db-1' }, /^CLUSTER_ADVERTISE_URL: a cluster node needs both/],
    [{ ...node, CLUSTER_LEASE_TTL_S: '1' }, /^CLUSTER_LEASE_TTL_S: must be between 2 and 600/],
    [{ ...node, CLUSTER_DURABILITY: 'eventual' }, /^CLUSTER_DURABILITY: must be "strict" or "async", got "eventual"/],
    [{ ...node, DB_HISTORY_DAYS: '7' }, /^DB_HISTORY_DAYS: time travel is not replicated in cluster mode yet/],
  ];
  for (const [env, message] of cases) assert.throws(() => loadConfig(testEnv(tempDir(), env)), (e: unknown) => e instanceof ConfigError && message.test(e.message), JSON.stringify(env));
});

test('a node delivers to mirrors (only as a database\'s primary: docs/scaling.md)', () => {
  const mirrors = [{ name: 'a', url: 'http://127.0.0.1:1/hook', secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' }];
  assert.deepEqual(loadConfig(testEnv(tempDir(), { ...node, DB_MIRRORS: JSON.stringify(mirrors) })).db.mirrors, mirrors);
});

test('a CLUSTER_ typo is named', () => {
  const config = loadConfig(testEnv(tempDir(), { ...node, CLUSTER_LEASE_TTL: '5' }));
  assert.deepEqual(config.warnings, ['CLUSTER_LEASE_TTL is not a scopebase setting and does nothing; did you mean CLUSTER_LEASE_TTL_S?']);
});
