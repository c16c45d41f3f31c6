// Capped exponential backoff with jitter: retries spread out so a recovering mirror is not stampeded.

export interface BackoffPolicy {
  baseMs: number;
  maxMs: number;
}

/** Delay before retry number `attempt` (1 = first retry): half fixed, half random ("equal jitter"), never above the cap. */
export function backoffDelay(policy: BackoffPolicy, attempt: number, random: () => number = Math.random): number {
  const exp = policy.baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 30);
  const capped = Math.min(policy.maxMs, exp);
  return Math.round(capped / 2 + random() * (capped / 2));
}
