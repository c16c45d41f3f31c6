// For tests of work a crafted request puts on the main event loop (every org's requests wait behind it): a quiet
// org's status asked back to back while the attack runs, the longest gap between two answers measured.
import assert from 'node:assert/strict';
import { call, ROOT_KEY, type HttpResult } from './product.ts';
import { repoSecret } from '../../src/shared/secrets.ts';

/** POST /{repo}/_db/{op} on the product at `url` with the repo's secret and a raw JSON body. */
export function rawDb(url: string, org: string, repo: string, op: string, body: Buffer): Promise<HttpResult> {
  return call(url, 'localhost', `/${repo}/_db/${op}`, { org, method: 'POST', rawBody: body, headers: { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), org, repo)}`, 'content-type': 'application/json' } });
}

/**
 * The attack's answer, how long it took, and the longest org `other`'s repo `quiet` went without an answer meanwhile
 * (one the server shed as overloaded, 503, is no answer).
 */
export async function whileQuietWaits<T>(url: string, attack: () => Promise<T>): Promise<{ result: T; worstMs: number; tookMs: number }> {
  const status = Buffer.from('{}');
  let done = false;
  let worstMs = 0;
  const probe = (async () => {
    let since = performance.now();
    while (!done) {
      const r = await rawDb(url, 'other', 'quiet', 'status', status);
      if (r.status !== 200 && r.status !== 503) assert.fail(r.text);
      if (r.status === 503) continue;
      worstMs = Math.max(worstMs, performance.now() - since);
      since = performance.now();
    }
  })();
  await new Promise((r) => setTimeout(r, 50)); // the probe is going before the attack arrives
  const t = performance.now();
  const result = await attack();
  const tookMs = performance.now() - t;
  done = true;
  await probe;
  return { result, worstMs, tookMs };
}
