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

interface Bucket { tokens: number; refusals: number; at: number; held: boolean }

export class RateLimiter {
  /** `refusals`: a second bucket, of refusals answered at once (see holdMs); `held`: the last refusal was past it. */
  private readonly buckets = new Map<string, Bucket>();
  private readonly opts: Required<RateLimitOptions>;
  /** Refusals answered at once, per ms, and at most at once: a tenth of a second's worth, so they come spread out. */
  private readonly refusalsPerMs: number;
  private readonly refusalBurst: number;

  constructor(opts: RateLimitOptions) {
    this.opts = { maxClients: 10_000, ...opts };
    const perSecond = Math.max(this.opts.burst, this.opts.perMinute / 60);
    this.refusalsPerMs = perSecond / 1000;
    this.refusalBurst = Math.min(perSecond, Math.max(8, perSecond / 10));
  }

  /**
   * Takes one token for `key` or throws 429 rate_limited with Retry-After. `now` is monotonic (performance.now()):
   * with the wall clock, a clock set back an hour refused every known key for an hour (docs/reliability.md).
   */
  take(key: string, now = performance.now()): void {
    const perMs = this.opts.perMinute / 60_000;
    const prev = this.buckets.get(key);
    const elapsed = prev ? Math.max(0, now - prev.at) : 0;
    const tokens = prev ? Math.min(this.opts.burst, prev.tokens + elapsed * perMs) : this.opts.burst;
    const refusals = prev ? Math.min(this.refusalBurst, prev.refusals + elapsed * this.refusalsPerMs) : this.refusalBurst;
    this.buckets.delete(key); // re-inserted last: the Map's order is least recently used first
    if (tokens < 1) {
      const held = refusals < 1;
      this.buckets.set(key, { tokens, refusals: held ? refusals : refusals - 1, at: now, held });
      const retryAfter = Math.max(1, Math.ceil((1 - tokens) / perMs / 1000));
      throw new ApiError('rate_limited', `${this.opts.refusal}; try again in ${retryAfter} s`, { retryAfterSeconds: retryAfter }, { 'retry-after': String(retryAfter) });
    }
    this.buckets.set(key, { tokens: tokens - 1, refusals, at: now, held: false });
    if (this.buckets.size > this.opts.maxClients) this.buckets.delete(this.buckets.keys().next().value!);
  }

  /**
   * How long to hold the refusal just made for `key` before answering it: 0, or HOLD_MS and up to half as long again
   * once its refusals outrun their own bucket — as many a second as its burst or its rate per second allow, at most a
   * tenth of that at once. Such a key ignores Retry-After (clients that wait as told come back at most once a second
   * each), and its refusals answered at once would let it spin on the CPU other keys need: a second's worth answered
   * in one go cost a quiet repo 3–5 × its p99 (docs/reliability.md). The random part spreads the held requests out:
   * held alike, they would all come back in the same instant, a burst every second.
   */
  holdMs(key: string): number {
    return this.buckets.get(key)?.held ? HOLD_MS * (1 + Math.random() / 2) : 0;
  }
}
