// This node's lease in etcd: its node key lives on it, and it may write as a primary only before the lease's end as it measures it.
import type { Logger } from '../shared/log.ts';
import type { Etcd } from './etcd.ts';
import { NODES } from './placement.ts';

/** Writes stop this long before the lease's end as this node measures it: clocks run at slightly different rates. */
const LEASE_MARGIN_MS = 250;

export class NodeLease {
  /** The lease's id in etcd ('0' before the first grant). */
  id = '0';
  /** The etcd revision that put this node's key: when it (re)joined, with whatever its DATA_DIR held then. */
  joinedAt = 0;
  /** Until when this node may write as a primary: the send time of the last renewal the lease survived, plus its TTL. */
  private deadline = 0;
  private readonly etcd: Etcd;
  private readonly ttlS: number;
  private readonly nodeId: string;
  private readonly advertiseUrl: string;
  private readonly logger: Logger;
  /** Told the wall-clock time (ms) writes must stop by, after each renewal. */
  private readonly onDeadline: (untilMs: number) => void;
  /** Before a new lease is granted: leader keys went with the old one. */
  private readonly onLost: () => void;

  constructor(etcd: Etcd, ttlS: number, nodeId: string, advertiseUrl: string, logger: Logger, hooks: { onDeadline: (untilMs: number) => void; onLost: () => void }) {
    this.etcd = etcd;
    this.ttlS = ttlS;
    this.nodeId = nodeId;
    this.advertiseUrl = advertiseUrl;
    this.logger = logger;
    this.onDeadline = hooks.onDeadline;
    this.onLost = hooks.onLost;
  }

  /** True once the lease's end (less the margin) has passed: no write, promotion or retake then. */
  lapsed(): boolean {
    return performance.now() > this.deadline - LEASE_MARGIN_MS;
  }

  async renew(first: boolean): Promise<void> {
    const sentAt = performance.now();
    if (!first && await this.etcd.keepAlive(this.id)) {
      this.deadline = sentAt + this.ttlS * 1000;
      this.onDeadline(performance.timeOrigin + this.deadline - LEASE_MARGIN_MS);
      return;
    }
    this.onLost();
    // First start, or the lease expired (a pause, etcd away): a new one. Leader keys went with the old one.
    this.id = await this.etcd.grant(this.ttlS);
    this.joinedAt = await this.etcd.put(`${NODES}${this.nodeId}`, this.advertiseUrl, this.id);
    this.deadline = sentAt + this.ttlS * 1000;
    this.onDeadline(performance.timeOrigin + this.deadline - LEASE_MARGIN_MS);
    if (!first) this.logger.warn('cluster: lease expired; this node rejoined with a new one');
  }

  async revoke(): Promise<void> {
    await this.etcd.revoke(this.id);
  }
}
