// `scopebase restore` into a cluster node's DATA_DIR (CLUSTER_ETCD set, as the node runs): refused while etcd shows
// the node alive, since back under its old lease it would be primary again with older copies than its followers';
// and it names the databases that wait for this node, which come back at the backup's versions (docs/backups.md).
import { clusterConfig } from '../shared/config.ts';
import { Etcd, EtcdError } from '../cluster/etcd.ts';
import { PlacementWatch } from '../cluster/placement.ts';
import { CliError, EXIT } from './output.ts';

type Env = Record<string, string | undefined>;

/** Nothing to check without CLUSTER_ETCD; else what to tell the operator once the restore is done (or a refusal). */
export async function checkClusterNode(env: Env): Promise<string | null> {
  const cluster = clusterConfig(env);
  if (cluster === null) return null;
  const node = cluster.nodeId;
  if (node === null) {
    throw new CliError(EXIT.config, 'CLUSTER_ETCD is set but CLUSTER_NODE_ID is not: run restore with the environment of the node whose DATA_DIR this is (its CLUSTER_NODE_ID and CLUSTER_ADVERTISE_URL), so it can check in etcd that the node is stopped; nothing was written');
  }
  const etcd = new Etcd(cluster.etcd);
  let view;
  try {
    view = await new PlacementWatch(etcd, 1000).refresh();
  } catch (e) {
    if (!(e instanceof EtcdError)) throw e;
    throw new CliError(EXIT.unreachable, `cannot check in etcd (CLUSTER_ETCD) that node ${node} is stopped: ${e.message}; nothing was written: bring etcd back first (or unset CLUSTER_ETCD to restore without the check)`);
  } finally {
    await etcd.close();
  }
  if (view.nodes.has(node)) {
    throw new CliError(EXIT.refused, `node ${node} is alive in etcd: it is running, or stopped less than its lease (CLUSTER_LEASE_TTL_S, ${cluster.leaseTtlS} s) ago, and would come back as primary with the backup's older copies; stop it, wait until its lease has expired (its followers take its databases over with every acknowledged write), then restore; nothing was written`);
  }
  const waiting = [...view.placements].filter(([, p]) => p.primary === node).map(([key]) => key).sort();
  if (waiting.length === 0) return null;
  const named = waiting.slice(0, 5).join(', ') + (waiting.length > 5 ? ` and ${waiting.length - 5} more` : '');
  return `node ${node} is still the recorded primary of ${waiting.length} database${waiting.length === 1 ? '' : 's'} no follower could take over (${named}): started on the restored DATA_DIR it gives each to its follower when the follower's copy holds versions written after the backup, and otherwise takes it back at this backup's versions (what was written after the backup is then lost). If the node's own disk survived, start it on that instead.`;
}
