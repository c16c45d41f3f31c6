// The reference mirror (SPEC 6): POST /hook keeps replicas; POST /{repo}/_db/query reads them.
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { ExecutorPool } from '../../db/executor/pool.ts';
import { ConfigError, type Config } from '../../shared/config.ts';
import { whsecProblem } from '../../shared/config-values.ts';
import type { ConnectionCap } from '../../shared/connection-cap.ts';
import { createHttpApp } from '../../shared/http.ts';
import type { Logger } from '../../shared/log.ts';
import { registerHook } from './hook.ts';
import { registerOtherOps } from './other-ops.ts';
import { registerQuery } from './query.ts';
import { ReplicaSet } from './replicas.ts';
import { executorFiles } from './replica.ts';
import { fetchChanges, fetchSnapshot } from './snapshot.ts';

export interface ReferenceMirrorOptions {
  config: Config;
  logger: Logger;
  /** Where snapshots come from: MIRROR_SOURCE_URL, or in `npm start` the proxy's own address (it listens first). */
  sourceUrl: string;
  /** The product's public cap: with `npm start` the mirror's port shares it with the proxy's. */
  connections: ConnectionCap;
}

export interface ReferenceMirror {
  app: FastifyInstance;
  replicas: ReplicaSet;
  close(): Promise<void>;
}

/** How long an early event waits for its predecessors before the replica heals from a snapshot. */
const HOLD_MS = 2000;

export function createReferenceMirror(opts: ReferenceMirrorOptions): ReferenceMirror {
  const { config } = opts;
  const secret = config.mirror.secret;
  if (secret === null) throw new ConfigError('MIRROR_SECRET: required to run the reference mirror (the whsec_ secret its DB_MIRRORS entry uses)');
  const bad = whsecProblem(secret);
  if (bad) throw new ConfigError(`MIRROR_SECRET: ${bad}`);
  const logger = opts.logger.child({ server: 'mirror' });
  // Reads run in the primary's executor processes: same sandbox, value encoding, result limits and query timeout.
  // So do applies (and every other use of a replica file): they run the tenant's expressions, and this one event
  // loop serves every org's replicas (replica.ts).
  const pool = new ExecutorPool({
    processes: Math.min(config.db.executors, 2),
    limits: {
      sync: 'normal', maxValueBytes: config.db.maxValueBytes, maxSizeBytes: config.db.maxSizeBytes, maxResultBytes: config.db.maxResultBytes, maxOpen: config.db.maxOpenDatabases, idleCloseMs: config.db.idleCloseMs,
      tempDir: join(config.dataDir, 'mirror-tmp'), tempMaxBytes: config.db.tempMaxBytes, memoryMaxBytes: config.db.memoryMaxBytes, // its own: a db start on this DATA_DIR empties tmp/
    },
    timeoutMs: config.db.queryTimeoutMs,
    beforeCreate: () => null,
    floor: () => null,
    onCommit: () => {},
    onRestart: (pid, reason) => logger.warn({ pid, reason }, 'mirror executor restarted'),
  });
  const source = { url: opts.sourceUrl, baseDomain: config.baseDomain, rootKey: config.rootKeys[0]!, timeoutMs: 120_000, maxBytes: config.db.maxSizeBytes * 2 };
  const replicas = new ReplicaSet({
    root: join(config.dataDir, 'mirror'),
    logger,
    fetchSnapshot: (scope, target) => fetchSnapshot(source, scope, target),
    fetchChanges: (scope, since) => fetchChanges(source, scope, since),
    // Under the primary's statement limit: the primary ran the same expressions within it when it wrote the rows.
    files: executorFiles(pool, config.db.queryTimeoutMs),
    holdMs: HOLD_MS,
  });
  // Changesets can be larger than the request that caused them (one UPDATE of many rows).
  const app = createHttpApp({ logger, bodyLimit: Math.max(config.db.maxBodyBytes * 4, 64 * 1024 * 1024), connections: opts.connections });
  registerHook(app, secret, replicas);
  registerQuery(app, { baseDomain: config.baseDomain, rootKeys: config.rootKeys, maxStatements: config.db.maxStatements, maxBodyBytes: config.db.maxBodyBytes, pool, replicas });
  registerOtherOps(app, { baseDomain: config.baseDomain, rootKeys: config.rootKeys });
  return {
    app,
    replicas,
    async close() {
      await app.close();
      await replicas.close();
      await pool.close();
    },
  };
}
