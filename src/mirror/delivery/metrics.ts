// Prometheus metrics of mirror delivery, on the shared admin registry. Registered once per process; the delivery
// thread's counters are added here by its relay (threaded.ts), and the gauges read its lanes at scrape time.
import { Counter, Gauge } from 'prom-client';
import { metrics } from '../../shared/metrics.ts';
import { addLag, LAG_BUCKETS, type LagCounts } from './thread-protocol.ts';

/** One lane as the scrape-time gauges see it. */
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
export const yielding = new Gauge({ name: 'scopebase_mirror_delivery_yielding', help: '1 while delivery trickles because the machine has no CPU to spare (it catches up when the load drops)', registers: [metrics] });
export const skipped = new Counter({ name: 'scopebase_mirror_skipped_events_total', help: 'Events no longer kept by the change log when their turn came (the mirror must resync from a snapshot)', labelNames: ['mirror'], registers: [metrics] });
export const changeLogReads = new Counter({ name: 'scopebase_mirror_change_log_reads_total', help: 'Change-log pages delivery read, by where: in its thread (the fast path) or by an executor (a large schema, or the repo past its read budget)', labelNames: ['by'], registers: [metrics] });
export const readBudgetTrips = new Counter({ name: 'scopebase_mirror_read_budget_trips_total', help: 'Times a repo\'s change-log reads took more of the delivery thread than their budget (executors then read them for a while)', registers: [metrics] });
/**
 * A Prometheus histogram added to in bucket counts: the delivery thread sends thousands of observations a second
 * as a few numbers, and observing each one here would cost the busy main thread (prom-client has no bulk observe).
 */
class LagHistogram {
  readonly name = 'scopebase_mirror_delivery_lag_seconds';
  readonly help = 'Time from commit to acknowledgement by the mirror';
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private byMirror = new Map<string, LagCounts>();

  add(mirror: string, more: LagCounts): void {
    let into = this.byMirror.get(mirror);
    if (!into) this.byMirror.set(mirror, (into = { counts: LAG_BUCKETS.map(() => 0).concat(0), sum: 0 }));
    more.counts.forEach((n, i) => (into.counts[i]! += n ?? 0));
    into.sum += more.sum;
  }

  observe(mirror: string, seconds: number): void {
    const one: LagCounts = { counts: [], sum: 0 };
    addLag(one, seconds);
    this.add(mirror, one);
  }

  /** prom-client's metric object: cumulative `_bucket` lines with `le`, then `_sum` and `_count`, per mirror. */
  async get() {
    const values: { metricName: string; labels: Record<string, string | number>; value: number }[] = [];
    for (const [mirror, { counts, sum }] of this.byMirror) {
      let total = 0;
      counts.forEach((n, i) => {
        total += n;
        values.push({ metricName: `${this.name}_bucket`, labels: { le: i < LAG_BUCKETS.length ? LAG_BUCKETS[i]! : '+Inf', mirror }, value: total });
      });
      values.push({ metricName: `${this.name}_sum`, labels: { mirror }, value: sum }, { metricName: `${this.name}_count`, labels: { mirror }, value: total });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    this.byMirror = new Map();
  }
}

export const lag = new LagHistogram();
metrics.registerMetric(lag as unknown as Parameters<typeof metrics.registerMetric>[0]);

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
