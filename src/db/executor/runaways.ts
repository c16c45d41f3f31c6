// Runaway passes: a repo's statements that have run long stop holding its share of processes, a bounded number of
// them, so its other databases are served while they run (SPEC 4.8: "requests to other databases go on unhindered").
// Bounded per repo and in the server, and their processes are room beyond the process limit: no repo takes capacity
// from another with them (src/db/DESIGN.md, "Scheduling").
import type { ExecutorProcess } from './process.ts';
import type { Job, Tenant } from './tenant.ts';

/** A statement running this long may be a runaway: its process may get a pass (well under DB_QUEUE_TARGET_MS's 500-ms standing). */
export const RUNAWAY_MS = 100;

export interface PassLimits {
  /** Passes one repo may hold at once (DB_EXECUTORS_PER_REPO). */
  perTenant: number;
  /** Passes in the server at once (DB_EXECUTORS). */
  total: number;
}

/** Which processes run a statement with a pass now: oldest statements first, within the limits. */
export class RunawayPasses {
  private readonly limits: PassLimits;
  private passes = new Map<ExecutorProcess, Tenant>();

  constructor(limits: PassLimits) {
    this.limits = limits;
  }

  /**
   * Judged again at every tick and pump, from scratch: a pass ends with its statement, and the next oldest runaway
   * gets it. Only scheduled jobs get one (an interactive transaction's statement runs on its own pinned process).
   */
  judge(all: readonly ExecutorProcess[], now: number): void {
    if (this.limits.total <= 0) return;
    const long: { p: ExecutorProcess; job: Job; ms: number }[] = [];
    for (const p of all) {
      const ms = p.alive ? p.runningFor(now) : 0;
      const job = ms > RUNAWAY_MS ? p.runningTag() as Job | undefined : undefined;
      if (job?.tenant) long.push({ p, job, ms });
    }
    if (long.length === 0 && this.passes.size === 0) return;
    long.sort((a, b) => b.ms - a.ms);
    const held = new Map<Tenant, number>();
    this.passes = new Map();
    for (const { p, job } of long) {
      if (this.passes.size >= this.limits.total) break;
      const n = held.get(job.tenant) ?? 0;
      if (n >= this.limits.perTenant) continue;
      held.set(job.tenant, n + 1);
      this.passes.set(p, job.tenant);
    }
  }

  /** A dead process holds no pass (it is replaced before the next judgement). */
  drop(p: ExecutorProcess): void {
    this.passes.delete(p);
  }

  /** Processes running a statement with a pass: room beyond the process limit. */
  get size(): number {
    return this.passes.size;
  }

  /** Processes `t` occupies that count toward its share: not those running a pass (its own or another repo's). */
  share(t: Tenant): number {
    if (this.passes.size === 0) return t.onProcs.size;
    let n = 0;
    for (const p of t.onProcs.keys()) if (!this.passes.has(p)) n++;
    return n;
  }
}
