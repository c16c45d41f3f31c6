// How start.ts plugs mirrors in: delivery next to a db service, and the reference mirror as a part.
import type { ChangeFeed, MirrorReport, Scope } from '../db/contract.ts';
import type { Config } from '../shared/config.ts';
import { ConfigError, MIRROR_SOURCE_REQUIRED } from '../shared/config-values.ts';
import type { ConnectionCap } from '../shared/connection-cap.ts';
import type { Logger } from '../shared/log.ts';
import { startDeliveryThread, type MirrorDelivery } from './delivery/threaded.ts';
import { createReferenceMirror, type ReferenceMirror } from './reference/server.ts';

export interface MirrorAttachable extends ChangeFeed {
  attachMirrors(report: MirrorReport): void;
  /** A page of the change log as the executor wrote it (DbService.readChangePage): delivery's reads. */
  readChangePage(scope: Scope, since: number, limit: number): Promise<Uint8Array>;
}

/** Starts delivery (on its own thread) when DB_MIRRORS names any mirror; start-up does not wait for the recovery scan. */
export function startMirrorDelivery(config: Config, logger: Logger, db: MirrorAttachable): MirrorDelivery | null {
  if (config.db.mirrors.length === 0) return null;
  // On a cluster node nothing leaves until the node grants it (src/cluster/node.ts): only a primary delivers.
  const delivery = startDeliveryThread({ feed: db, pages: (scope, since, limit) => db.readChangePage(scope, since, limit), mirrors: config.db.mirrors, dataDir: config.dataDir, logger, ...config.db.mirrorDelivery, gated: config.cluster !== null });
  db.attachMirrors(delivery);
  return delivery;
}

/** The reference mirror listening on MIRROR_PORT; snapshots from MIRROR_SOURCE_URL, else from `fallbackSource` (the proxy in `npm start`). */
export async function listenReferenceMirror(config: Config, logger: Logger, host: string, fallbackSource: string | null, connections: ConnectionCap): Promise<{ mirror: ReferenceMirror; url: string }> {
  const sourceUrl = config.mirror.sourceUrl ?? fallbackSource;
  if (sourceUrl === null) throw new ConfigError(MIRROR_SOURCE_REQUIRED);
  const mirror = createReferenceMirror({ config, logger, sourceUrl, connections });
  try {
    return { mirror, url: await mirror.app.listen({ port: config.mirror.port ?? config.port, host }) };
  } catch (e) {
    // Its executors are running already: left so, a start that failed here (MIRROR_PORT taken) never let its process exit.
    await mirror.close().catch(() => {});
    throw e;
  }
}
