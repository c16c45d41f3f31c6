// How start.ts plugs mirrors in: delivery next to a db service, and the reference mirror as a part.
import type { ChangeFeed, MirrorReport } from '../db/contract.ts';
import type { Config } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import { createDeliveryWorker, type DeliveryWorker } from './delivery/worker.ts';
import { createReferenceMirror, type ReferenceMirror } from './reference/server.ts';

export interface MirrorAttachable extends ChangeFeed {
  attachMirrors(report: MirrorReport): void;
}

/** Starts delivery when DB_MIRRORS names any mirror; start-up does not wait for the recovery scan. */
export function startMirrorDelivery(config: Config, logger: Logger, db: MirrorAttachable): DeliveryWorker | null {
  if (config.db.mirrors.length === 0) return null;
  const worker = createDeliveryWorker({ feed: db, mirrors: config.db.mirrors, dataDir: config.dataDir, logger, ...config.db.mirrorDelivery });
  db.attachMirrors(worker);
  return worker;
}

/** The reference mirror listening on MIRROR_PORT; snapshots from MIRROR_SOURCE_URL, else from `fallbackSource` (the proxy in `npm start`). */
export async function listenReferenceMirror(config: Config, logger: Logger, host: string, fallbackSource: string | null): Promise<{ mirror: ReferenceMirror; url: string }> {
  const mirror = createReferenceMirror({ config, logger, sourceUrl: () => config.mirror.sourceUrl ?? fallbackSource });
  const url = await mirror.app.listen({ port: config.mirror.port ?? config.port, host });
  return { mirror, url };
}
