// The executor pools' metrics: requests waiting for a process, and processes replaced.
import { Counter, Gauge } from 'prom-client';
import { metrics } from '../shared/metrics.ts';
import type { ExecutorPool } from './executor/pool.ts';

/** The pools the queue gauge sums: a service adds its own on start and removes it on close. */
export const pools = new Set<ExecutorPool>();
new Gauge({
  name: 'scopebase_db_queued_requests', help: 'Requests waiting for an executor process', registers: [metrics],
  collect() {
    let n = 0;
    for (const p of pools) n += p.waiting;
    this.set(n);
  },
});
export const restarts = new Counter({ name: 'scopebase_db_executor_restarts_total', help: 'Executor processes stopped (runaway statement) or died and replaced', registers: [metrics] });
