// An in-memory token bucket per key (a client address, a repo), bounded in size: sign-in floods, per-repo limits.
import { ApiError } from './errors.ts';

export interface RateLimitOptions {
  burst: number;
  perMinute: number;
  /** Says what was limited, in the 429's message, e.g. "too many sign-in attempts from this address". */
  refusal: string;
  maxClients?: number;
}

const HOLD_MS = 1000;

export class RateLimiter {
  /** `refused`: the key's refusals in the second that began at `refusedSince`. */
  private readonly buckets = new Map<string, { tokens: number; at: number; refused: number; refusedSince: number }>();
  private readonly opts: Required<RateLimitOptions>;

  constructor(opts: RateLimitOptions) {
    this.opts = { maxClients: 10_000, ...opts };
  }

  /**
   * Takes one token for `key` or throws 429 rate_limited with Retry-After. `now` is monotonic (performance.now()):
   * with the wall clock, a clock set back an hour refused every known key for an hour (docs/reliability.md).
   */
  take(key: string, now = performance.now()): void {
    const perMs = this.opts.perMinute / 60_000;
    const prev = this.buckets.get(key);
    const tokens = prev ? Math.min(this.opts.burst, prev.tokens + Math.max(0, now - prev.at) * perMs) : this.opts.burst;
    this.buckets.delete(key); // re-inserted last: the Map's order is least recently used first
    if (tokens < 1) {
      const fresh = !prev || now - prev.refusedSince >= 1000;
      this.buckets.set(key, { tokens, at: now, refused: fresh ? 1 : prev.refused + 1, refusedSince: fresh ? now : prev.refusedSince });
      const retryAfter = Math.max(1, Math.ceil((1 - tokens) / perMs / 1000));
      throw new ApiError('rate_limited', `${this.opts.refusal}; try again in ${retryAfter} s`, { retryAfterSeconds: retryAfter }, { 'retry-after': String(retryAfter) });
    }
    this.buckets.set(key, { tokens: tokens - 1, at: now, refused: prev?.refused ?? 0, refusedSince: prev?.refusedSince ?? now });
    if (this.buckets.size > this.opts.maxClients) this.buckets.delete(this.buckets.keys().next().value!);
  }

  /**
   * How long to hold the refusal just made for `key` before answering it: 0, or HOLD_MS and up to half as long again
   * once it was refused more times within a second than its burst or its rate per second allow — it ignores
   * Retry-After (clients that wait as told come back at most once a second each), and its refusals answered at once
   * would let it spin at thousands of requests a second on the CPU other keys need. The random part spreads the held
   * requests out: held alike, they would all come back in the same instant, a burst every second.
   */
  holdMs(key: string): number {
    const refused = this.buckets.get(key)?.refused ?? 0;
    return refused > Math.max(this.opts.burst, this.opts.perMinute / 60) ? HOLD_MS * (1 + Math.random() / 2) : 0;
  }
}
