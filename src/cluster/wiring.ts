// How start.ts plugs a cluster in: a `serve db` node (lease, replication, follower endpoints) or a proxy's router.
import type { FastifyInstance } from 'fastify';
import type { DbService } from '../db/service.ts';
import { proxyToken } from '../db/remote.ts';
import type { Config } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import { ClusterNode } from './node.ts';
import type { MirrorGate } from '../db/contract.ts';
import { ClusterRouter } from './router.ts';
import { registerFollowerRoutes } from './routes.ts';

/**
 * Before the server listens: the follower endpoints registered, the node's lease taken, replication attached.
 * `mirrors`: this node's mirror delivery (started gated), which sends only what the node grants.
 */
export async function startClusterNode(config: Config, logger: Logger, db: DbService, app: FastifyInstance, mirrors: MirrorGate | null = null): Promise<ClusterNode> {
  const tokens = config.rootKeys.map(proxyToken);
  const node = new ClusterNode(config.cluster!, db, logger, tokens[0]!, mirrors, { durableCommits: config.db.sync === 'full', maxDatabasesPerRepo: config.db.maxDatabasesPerRepo });
  registerFollowerRoutes(app, node, db, tokens);
  await node.start();
  db.attachReplication(node);
  return node;
}

export async function startClusterRouter(config: Config): Promise<ClusterRouter> {
  const router = new ClusterRouter(config.cluster!, config.rootKeys[0]!);
  await router.start();
  return router;
}
