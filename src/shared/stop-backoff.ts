// After work on a key was stopped (an executor killed under a tenant's apply at its time limit), the key is spared
// that work for a while: `firstMs`, doubling at each further stop up to `maxMs`, forgotten once the work succeeds.
// A tenant whose every apply runs past the limit then costs one stopped executor a period, not one a write. Used by a
// cluster primary (snapshots instead of applies, src/cluster/shipper.ts) and the reference mirror (src/mirror/reference).

export class StopBackoff {
  private readonly stops = new Map<string, { until: number; ms: number }>();
  private readonly firstMs: number;
  private readonly maxMs: number;
  private readonly now: () => number;

  /** `now`: a monotonic clock in ms (tests pass their own). */
  constructor(firstMs: number, maxMs: number, now: () => number = () => performance.now()) {
    this.firstMs = firstMs;
    this.maxMs = maxMs;
    this.now = now;
  }

  /** How much longer the key is spared, in ms: 0 when it is not. */
  remaining(key: string): number {
    const stop = this.stops.get(key);
    return stop === undefined ? 0 : Math.max(0, stop.until - this.now());
  }

  /** One more stop: the key is spared from now for `firstMs`, or twice its last period up to `maxMs`. Returns the period. */
  penalize(key: string): number {
    const before = this.stops.get(key);
    const ms = before === undefined ? this.firstMs : Math.min(before.ms * 2, this.maxMs);
    this.stops.set(key, { until: this.now() + ms, ms });
    return ms;
  }

  /** The work succeeded: the next stop starts from `firstMs` again. */
  clear(key: string): void {
    this.stops.delete(key);
  }
}
