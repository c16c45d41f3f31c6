// Deletes expired rows until none is left, in slices that each hold the event loop a few milliseconds at most.
import type { Logger } from './log.ts';

/** One kind of expired row: deletes at most `limit` of those expired at `now` and says how many it deleted. */
export interface SweepStep {
  what: string;
  run(now: number, limit: number): number;
}

/** How often the account and credential stores delete what expired (all of it each time). */
export const CLEANUP_EVERY_MS = 10 * 60_000;

/** A slice aims at this much event-loop time: requests wait at most about this long behind a sweep. */
const SLICE_TARGET_MS = 10;
const MIN_BATCH = 10;
const MAX_BATCH = 5000;

export interface Sweeper {
  /** One full sweep (what the timer runs): every step until a slice finds fewer rows than it may delete. */
  sweep(): Promise<Record<string, number>>;
  /** Stops the timer and waits for a sweep under way to stop at its next slice. */
  stop(): Promise<void>;
}

/**
 * Runs every `everyMs` (and once at start). Each step repeats while a slice came back full, so a backlog of any size
 * is gone by the end of the sweep (a fixed 500 rows per 10 minutes fell behind a busy org for good). The slice's row
 * count follows its measured time: halved past SLICE_TARGET_MS, doubled under half of it.
 */
export function startSweeper(opts: { everyMs: number; steps: SweepStep[]; logger: Logger }): Sweeper {
  let stopped = false;
  let running: Promise<Record<string, number>> | null = null;
  const batches = new Map<string, number>(opts.steps.map((s) => [s.what, 200]));

  async function sweepAll(): Promise<Record<string, number>> {
    const now = Date.now(); // rows that expire during the sweep wait for the next one: every sweep ends
    const removed: Record<string, number> = {};
    for (const step of opts.steps) {
      removed[step.what] = 0;
      for (;;) {
        if (stopped) return removed;
        const batch = batches.get(step.what)!;
        const started = performance.now();
        const n = step.run(now, batch);
        const took = performance.now() - started;
        removed[step.what] += n;
        if (took > SLICE_TARGET_MS) batches.set(step.what, Math.max(MIN_BATCH, Math.floor(batch / 2)));
        else if (took < SLICE_TARGET_MS / 2 && n === batch) batches.set(step.what, Math.min(MAX_BATCH, batch * 2));
        if (n < batch) break;
        await new Promise((r) => setImmediate(r)); // requests that arrived meanwhile go first
      }
    }
    return removed;
  }

  const sweep = (): Promise<Record<string, number>> => {
    running ??= sweepAll()
      .then((removed) => {
        if (Object.values(removed).some((n) => n > 0)) opts.logger.debug({ removed }, 'expired rows removed');
        return removed;
      })
      .catch((err: unknown) => {
        if (!stopped) opts.logger.warn({ err }, 'removing expired rows failed; the next sweep tries again');
        return {};
      })
      .finally(() => {
        running = null;
      });
    return running;
  };
  void sweep();
  const timer = setInterval(() => void sweep(), opts.everyMs).unref();
  return {
    sweep,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
