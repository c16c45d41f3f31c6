// On a cluster node, delivery sends a database's events only while the cluster says so (docs/scaling.md, Mirrors):
// this node is the database's primary, within its lease, and only events its follower already holds. An event
// delivered is then in every later primary's change log with the same id, whichever node takes over.
import type { Scope } from '../../db/contract.ts';
import { scopeKey } from './lane.ts';
import type { GateChange } from './thread-protocol.ts';

/** Milliseconds on a clock every thread of the process shares (each thread's performance.now() has its own origin). */
export const sharedNow = (): number => performance.timeOrigin + performance.now();

export class DeliveryGate {
  /** Per database this node is primary of: the highest version its follower holds. */
  private readonly grants = new Map<string, { scope: Scope; upTo: number }>();
  private leaseUntil = 0;

  allows(scope: Scope, version: number): boolean {
    const grant = this.grants.get(scopeKey(scope));
    return grant !== undefined && version <= grant.upTo && sharedNow() < this.leaseUntil;
  }

  /** Applies a change; returns the databases that may now send more (to be noticed up to their grant). */
  apply(change: GateChange): { scope: Scope; upTo: number }[] {
    if (change.revokeAll) this.grants.clear();
    for (const [org, repo, database] of change.revoked) this.grants.delete(scopeKey({ org, repo, database }));
    const lapsed = sharedNow() >= this.leaseUntil;
    if (change.leaseUntil !== null) this.leaseUntil = change.leaseUntil;
    const opened: { scope: Scope; upTo: number }[] = [];
    for (const [org, repo, database, upTo] of change.grants) {
      const scope = { org, repo, database };
      const key = scopeKey(scope);
      const had = this.grants.get(key);
      if (had && had.upTo >= upTo) continue;
      this.grants.set(key, { scope, upTo });
      opened.push({ scope, upTo });
    }
    // A lease renewed after this node's clock passed its end (a slow renewal): every granted lane may move again.
    if (lapsed && change.leaseUntil !== null && sharedNow() < this.leaseUntil) opened.push(...this.grants.values());
    return opened;
  }
}
