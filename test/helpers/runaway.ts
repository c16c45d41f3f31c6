// What the scheduler and executor tests share: a statement that never ends by itself, a pause, a p99, a setup write.
import type { HttpResult } from './product.ts';

/** Runs until DB_QUERY_TIMEOUT_MS stops it (an endless recursive count). */
export const RUNAWAY = 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c';

export const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export function p99(samples: number[]): number {
  const s = [...samples].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))]!;
}

/** A setup write under a short DB_QUERY_TIMEOUT_MS, sent again if a loaded machine stopped it there (nothing applied). */
export async function setupWrite(send: () => Promise<HttpResult>): Promise<HttpResult> {
  let r = await send();
  for (let i = 1; i < 5 && r.status === 422 && r.json?.error?.code === 'query_timeout'; i++) r = await send();
  return r;
}
