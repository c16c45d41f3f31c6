// How much of the delivery thread one repo's change-log reads may take. The thread serves every org on the node and a
// read there is a synchronous SQLite call: while one runs, no other org's event moves. A repo whose reads there took
// more than its budget has them read by executors for a period (feed.ts), doubling while it keeps tripping.
import { StopBackoff } from '../../shared/stop-backoff.ts';

/** A repo's reads may take this much of the thread per window (2 %): every other org's events wait at most that for it. */
export const READ_BUDGET_MS = 200;
/**
 * Of each read, only the time past this counts: a busy repo's many quick reads (~50 µs each: 500 writes/s alone would
 * pass the budget) hold the thread less than sending their events does; a parse or a large page takes milliseconds.
 */
export const FREE_READ_MS = 1;
/** The window, fixed from the repo's first read in it. */
export const READ_WINDOW_MS = 10_000;
/** A repo past its budget is read by executors this long, twice that each time it trips again, up to MAX_PERIOD_MS. */
export const FIRST_PERIOD_MS = 30_000;
export const MAX_PERIOD_MS = 10 * 60_000;

export class ReadBudget {
  private readonly windows = new Map<string, { start: number; spentMs: number }>();
  private readonly periods: StopBackoff;
  private readonly now: () => number;

  /** `now`: a monotonic clock in ms (tests pass their own). */
  constructor(now: () => number = () => performance.now()) {
    this.now = now;
    this.periods = new StopBackoff(FIRST_PERIOD_MS, MAX_PERIOD_MS, now);
  }

  /** Whether `repo`'s reads go to executors now. */
  offThread(repo: string): boolean {
    return this.periods.remaining(repo) > 0;
  }

  /** Counts a read of `ms` in the thread to `repo` (past FREE_READ_MS): the period its reads now go to executors for, or 0 within budget. */
  spend(repo: string, ms: number): number {
    const now = this.now();
    let window = this.windows.get(repo);
    if (window && now - window.start >= READ_WINDOW_MS) {
      this.ended(repo);
      window = undefined;
    }
    if (!window) this.windows.set(repo, (window = { start: now, spentMs: 0 }));
    window.spentMs += Math.max(0, ms - FREE_READ_MS);
    if (window.spentMs <= READ_BUDGET_MS) return 0;
    this.windows.delete(repo);
    return this.periods.penalize(repo);
  }

  /** Forgets the windows that ended (repos that read nothing since). */
  sweep(): void {
    const now = this.now();
    for (const [repo, window] of this.windows) if (now - window.start >= READ_WINDOW_MS) this.ended(repo);
  }

  /** A whole window within budget (one past it was deleted when it tripped): the next trip starts from the first period. */
  private ended(repo: string): void {
    this.windows.delete(repo);
    this.periods.clear(repo);
  }
}
