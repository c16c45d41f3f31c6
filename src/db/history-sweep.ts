// The background sweep of time-travel histories (history/DESIGN.md, "Bounds"). A writer prunes its database's history
// when it closes a segment, so without this an idle database kept its history past DB_HISTORY_DAYS, and a repo's idle
// databases kept theirs past its cap, until their next write. Every DB_HISTORY_SWEEP_MS it visits the next few
// databases, repo after repo; a visit is one message on an executor in the database's lane (history/prune.ts).
import type { Logger } from '../shared/log.ts';
import type { Scope } from './contract.ts';
import type { ExecutorPool } from './executor/pool.ts';
import type { Layout } from './layout.ts';

/** Databases visited per tick, one after another: at most one executor busy with it, a few ms a visit. */
export const VISITS_PER_TICK = 16;

export interface SweepParts { layout: Layout; pool: ExecutorPool; everyMs: number; logger: Logger }

export class HistorySweep {
  private readonly parts: SweepParts;
  private readonly timer: NodeJS.Timeout;
  /** Where the walk over every database is: it goes on at the next tick, and starts again once done. */
  private walk: AsyncIterator<Scope> | null = null;
  private running: Promise<void> | null = null;
  private stopped = false;

  constructor(parts: SweepParts) {
    this.parts = parts;
    this.timer = setInterval(() => {
      this.running ??= this.tick().finally(() => (this.running = null));
    }, parts.everyMs).unref();
  }

  private async tick(): Promise<void> {
    try {
      for (let i = 0; i < VISITS_PER_TICK && !this.stopped; i++) {
        this.walk ??= this.parts.layout.all()[Symbol.asyncIterator]();
        const next = await this.walk.next();
        if (next.done) {
          this.walk = null;
          return;
        }
        await this.visit(next.value);
      }
    } catch (e) {
      this.walk = null;
      this.parts.logger.error({ err: e }, 'history sweep failed (it starts over at its next tick)');
    }
  }

  private async visit(scope: Scope): Promise<void> {
    const where = { org: scope.org, repo: scope.repo, database: scope.database };
    try {
      const res = await this.parts.pool.upkeep(scope, this.parts.layout.path(scope), { op: 'history.prune' });
      const freed = res.status === 200 ? (JSON.parse(res.body.toString('utf8')) as { freed: number }).freed : null;
      if (freed === null) this.parts.logger.warn({ ...where, status: res.status, error: res.body.toString('utf8').slice(0, 300) }, 'history sweep: pruning a database\'s history failed (tried again next round)');
      else if (freed > 0) this.parts.logger.info({ ...where, freedBytes: freed }, 'history sweep: old history dropped (DB_HISTORY_DAYS, DB_HISTORY_MAX_BYTES_PER_REPO)');
    } catch (e) {
      // Refused (overloaded, shutting down) or its executor lost: the next round visits it again.
      this.parts.logger.debug({ ...where, err: e }, 'history sweep: visit not run');
    }
  }

  /** Stops ticking and waits for the visit under way. */
  async close(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }
}
