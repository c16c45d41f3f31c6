// Runaway passes: a repo's oldest statement that has run long stops holding its share of processes, so its other
// databases are served while its runaways run (SPEC 4.8: "requests to other databases go on unhindered"). One per
// repo, a bounded number in the server, and their processes are room beyond the process limit: no repo takes
// capacity from another with them (src/db/DESIGN.md, "Scheduling").
import type { ExecutorProcess } from './process.ts';
import { SLOW_MS } from './process-set.ts';
import type { Job, Tenant } from './tenant.ts';

/** A statement running this long may be a runaway (well under DB_QUEUE_TIMEOUT_MS, and the 500 ms a queue stands after). */
export const RUNAWAY_MS = 100;

/**
 * The tag of an interactive transaction's message (Scheduler.runOn): its repo, whose share the message occupies, so
 * that its long statement may hold the repo's pass as a scheduled job's does. Never a Job (nothing hedges or reruns it).
 */
export class PinnedMessage {
  readonly tenant: Tenant;

  constructor(tenant: Tenant) {
    this.tenant = tenant;
  }
}

/** Which processes run a statement with a pass now: each repo's oldest one, the oldest first, at most `total`. */
export class RunawayPasses {
  private readonly total: number;
  private readonly perTenant: number;
  private passes = new Map<ExecutorProcess, Tenant>();

  /** `total`: passes in the server at once (DB_EXECUTORS); `perTenant`: the processes a repo may occupy (its share). */
  constructor(total: number, perTenant: number) {
    this.total = total;
    this.perTenant = perTenant;
  }

  /**
   * Judged again at every tick and pump, from scratch: a pass ends with its statement, and the next oldest runaway
   * gets it: a scheduled job's or an interactive transaction's (its pinned process counted in its repo's share, two
   * transactions' runaways held the share and the repo's other databases got 503).
   */
  judge(all: readonly ExecutorProcess[], now: number): void {
    if (this.total <= 0) return;
    const long: { p: ExecutorProcess; tenant: Tenant; ms: number }[] = [];
    for (const p of all) {
      const ms = p.alive ? p.runningFor(now) : 0;
      const tag = ms > RUNAWAY_MS ? p.runningTag() as Job | PinnedMessage | undefined : undefined;
      if (tag?.tenant) long.push({ p, tenant: tag.tenant, ms });
    }
    if (long.length === 0 && this.passes.size === 0) return;
    long.sort((a, b) => b.ms - a.ms);
    const held = new Set<Tenant>();
    this.passes = new Map();
    for (const { p, tenant } of long) {
      if (this.passes.size >= this.total) break;
      if (held.has(tenant)) continue;
      held.add(tenant);
      this.passes.set(p, tenant);
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

  /**
   * Whether a repo holding a pass occupies its whole share counted without passes: only then may it go beyond it
   * (Placement.allowed), and one more process is kept free for that. A slow statement of a repo below its share
   * needs none: that process was spawned for each one past RUNAWAY_MS (a first write's fsync) and retired 5 s later.
   */
  get beyondShare(): boolean {
    for (const t of this.passes.values()) if (t.onProcs.size >= this.perTenant) return true;
    return false;
  }

  /**
   * Processes `t` occupies that count toward its share: not those running a pass (its own or another repo's), nor
   * those where it only waits (`occupied`).
   */
  share(t: Tenant, now: number): number {
    let n = 0;
    for (const p of t.onProcs.keys()) if (!this.passes.has(p) && !onlyWaiting(p, t, now)) n++;
    return n;
  }
}

/**
 * Processes `t` occupies: not those where its jobs only wait behind another repo's slow statement (a read pipelined
 * there just before the statement turned slow). Its reads there are hedged elsewhere; counted, they filled its share
 * and their own hedges could not start (refused, 503, while the process they waited on ran another repo's runaway).
 */
export function occupied(t: Tenant, now: number): number {
  let n = 0;
  for (const p of t.onProcs.keys()) if (!onlyWaiting(p, t, now)) n++;
  return n;
}

function onlyWaiting(p: ExecutorProcess, t: Tenant, now: number): boolean {
  return p.runningFor(now) > SLOW_MS && (p.runningTag() as Job | PinnedMessage | undefined)?.tenant !== t;
}
