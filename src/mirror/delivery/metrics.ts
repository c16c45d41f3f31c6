// Prometheus metrics of mirror delivery, on the shared admin registry. Registered once per process; every live worker reports.
import { Counter, Gauge, Histogram } from 'prom-client';
import { metrics } from '../../shared/admin.ts';

/** What a worker exposes to the scrape-time gauges. */
export interface LaneView {
  mirror: string;
  org: string;
  repo: string;
  database: string;
  delivered: number;
  pending: number;
  stalled: boolean;
}

const sources = new Set<() => Iterable<LaneView>>();

export function registerLaneSource(source: () => Iterable<LaneView>): () => void {
  sources.add(source);
  return () => sources.delete(source);
}

function* allLanes(): Iterable<LaneView> {
  for (const source of sources) yield* source();
}

export const attempts = new Counter({ name: 'scopebase_mirror_delivery_attempts_total', help: 'Delivery attempts to mirrors', labelNames: ['mirror'], registers: [metrics] });
export const failures = new Counter({ name: 'scopebase_mirror_delivery_failures_total', help: 'Failed delivery attempts, by kind (redirect, client_error, server_error, timeout, network)', labelNames: ['mirror', 'kind'], registers: [metrics] });
export const delivered = new Counter({ name: 'scopebase_mirror_delivered_events_total', help: 'Events acknowledged by mirrors (2xx)', labelNames: ['mirror'], registers: [metrics] });
export const skipped = new Counter({ name: 'scopebase_mirror_skipped_events_total', help: 'Events no longer kept by the change log when their turn came (the mirror must resync from a snapshot)', labelNames: ['mirror'], registers: [metrics] });
export const lag = new Histogram({
  name: 'scopebase_mirror_delivery_lag_seconds', help: 'Time from commit to acknowledgement by the mirror', labelNames: ['mirror'],
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600], registers: [metrics],
});

new Gauge({
  name: 'scopebase_mirror_pending_events', help: 'Events committed but not yet acknowledged, per mirror', labelNames: ['mirror'], registers: [metrics],
  collect() {
    this.reset();
    const sums = new Map<string, number>();
    for (const l of allLanes()) sums.set(l.mirror, (sums.get(l.mirror) ?? 0) + l.pending);
    for (const [mirror, n] of sums) this.set({ mirror }, n);
  },
});

new Gauge({
  name: 'scopebase_mirror_stalled', help: 'Databases whose delivery to the mirror has not succeeded for longer than the stall threshold', labelNames: ['mirror'], registers: [metrics],
  collect() {
    this.reset();
    const sums = new Map<string, number>();
    for (const l of allLanes()) sums.set(l.mirror, (sums.get(l.mirror) ?? 0) + (l.stalled ? 1 : 0));
    for (const [mirror, n] of sums) this.set({ mirror }, n);
  },
});

// One series per database would be unbounded (10,000 databases): only databases with a backlog are reported.
new Gauge({
  name: 'scopebase_mirror_delivered_version', help: 'Acknowledged version of databases that have a backlog (pending > 0 or stalled)', labelNames: ['mirror', 'org', 'repo', 'database'], registers: [metrics],
  collect() {
    this.reset();
    for (const l of allLanes()) {
      if (l.pending > 0 || l.stalled) this.set({ mirror: l.mirror, org: l.org, repo: l.repo, database: l.database }, l.delivered);
    }
  },
});
