// SPEC 9.1, cluster mode (docs/scaling.md): CLUSTER_* settings, and what a cluster node refuses to run.
import { fail, int, serviceUrl, str, type Env } from './config-values.ts';

export interface ClusterConfig {
  etcd: string[];
  /** This node's name in placement (a `serve db` node); null for a proxy, which only routes. */
  nodeId: string | null;
  /** Where the other nodes and the proxies reach this node's `serve db`. */
  advertiseUrl: string | null;
  leaseTtlS: number;
  /** strict: a write's 200 waits for the follower; async: it does not (docs/scaling.md states the loss window). */
  durability: 'strict' | 'async';
}

/** What a cluster node does not replicate yet (docs/scaling.md) is refused there rather than silently diverging. */
export function clusterNodeOnly<T extends number | unknown[]>(cluster: ClusterConfig | null, name: string, what: string, value: T): T {
  const on = typeof value === 'number' ? value > 0 : value.length > 0;
  if (cluster?.nodeId && on) fail(name, `${what} is not replicated in cluster mode yet (docs/scaling.md): leave it unset on cluster nodes`);
  return value;
}

/**
 * CLUSTER_ETCD (comma-separated endpoints) turns cluster mode on; a node also needs its id and advertised URL. Reads
 * nothing else and writes nothing (`restore` checks a node with it: loadConfig may generate keys into DATA_DIR).
 */
export function clusterConfig(env: Env): ClusterConfig | null {
  const endpoints = str(env, 'CLUSTER_ETCD');
  const nodeId = str(env, 'CLUSTER_NODE_ID') ?? null;
  const advertiseUrl = serviceUrl(env, 'CLUSTER_ADVERTISE_URL', 'a node\'s `scopebase serve db`') ?? null;
  const leaseTtlS = int(env, 'CLUSTER_LEASE_TTL_S', 10, 2, 600);
  const durability = str(env, 'CLUSTER_DURABILITY') ?? 'strict';
  if (durability !== 'strict' && durability !== 'async') fail('CLUSTER_DURABILITY', `must be "strict" or "async", got ${JSON.stringify(durability.slice(0, 20))}`);
  if (endpoints === undefined) {
    if (nodeId !== null || advertiseUrl !== null) fail('CLUSTER_ETCD', 'CLUSTER_NODE_ID and CLUSTER_ADVERTISE_URL need the etcd endpoints too');
    return null;
  }
  const etcd = endpoints.split(',').map((e) => e.trim()).filter((e) => e !== '');
  for (const e of etcd) if (!/^https?:\/\/[^\s/]+$/.test(e)) fail('CLUSTER_ETCD', `each endpoint must be http(s)://host:port, got ${JSON.stringify(e.slice(0, 60))}`);
  if (nodeId !== null && !/^[a-z0-9][a-z0-9-]{0,62}$/.test(nodeId)) fail('CLUSTER_NODE_ID', 'must be 1-63 lowercase letters, digits or hyphens');
  if ((nodeId === null) !== (advertiseUrl === null)) fail(nodeId === null ? 'CLUSTER_NODE_ID' : 'CLUSTER_ADVERTISE_URL', 'a cluster node needs both CLUSTER_NODE_ID and CLUSTER_ADVERTISE_URL');
  return { etcd, nodeId, advertiseUrl, leaseTtlS, durability };
}
