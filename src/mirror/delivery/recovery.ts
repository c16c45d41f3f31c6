// After a restart: find databases with undelivered events without blocking start-up (10,000 databases on disk is normal).
import type { ChangeFeed, Scope } from '../../db/contract.ts';

/** Visits every database with at most `concurrency` visits in flight; stops early when `stopped()` turns true. */
export async function scanDatabases(feed: ChangeFeed, concurrency: number, stopped: () => boolean, visit: (scope: Scope) => Promise<void>): Promise<void> {
  const iterator = feed.listDatabases()[Symbol.asyncIterator]();
  let failure: unknown = null;
  // Concurrent next() calls on one async iterator are queued by the generator, so each scope is visited once.
  const walker = async () => {
    while (!stopped() && failure === null) {
      const next = await iterator.next();
      if (next.done) return;
      try {
        await visit(next.value);
      } catch (e) {
        failure ??= e;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, concurrency) }, walker));
  } finally {
    if (stopped()) await iterator.return?.();
  }
  if (failure !== null) throw failure;
}
