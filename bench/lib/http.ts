// A tiny HTTP client for set-up and probes (node:http: it lets us set Host, which fetch does not).
import { Agent, request } from 'node:http';
import { request as undiciRequest, type Dispatcher } from 'undici';
import { repoSecret } from '../../src/shared/secrets.ts';

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

export interface HttpResponse { status: number; headers: Record<string, string | string[] | undefined>; body: string }

export function http(url: string, opts: { method?: string; headers?: Record<string, string>; body?: string | Buffer; timeoutMs?: number } = {}): Promise<HttpResponse> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'GET', headers: opts.headers, agent, timeout: opts.timeoutMs ?? 60_000 }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`timeout: ${url}`)));
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** POSTs JSON and returns the parsed reply; throws with status and body unless 2xx. */
export async function postJson(url: string, headers: Record<string, string>, value: unknown): Promise<unknown> {
  const res = await http(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(value) });
  if (res.status < 200 || res.status > 299) throw new Error(`HTTP ${res.status} from ${new URL(url).pathname}: ${res.body.slice(0, 300)}`);
  return res.body ? JSON.parse(res.body) : null;
}

export function closeHttp(): void {
  agent.destroy();
}

export interface JsonAnswer { status: number; json: any } // eslint-disable-line @typescript-eslint/no-explicit-any

/** For load and fault scripts: one request through undici that never throws (status 0 = no answer in time). */
export async function sendJson(url: string, opts: { method?: string; headers: Record<string, string>; body?: unknown; timeoutMs?: number; dispatcher: Dispatcher }): Promise<JsonAnswer> {
  const timeout = opts.timeoutMs ?? 30_000;
  try {
    const res = await undiciRequest(url, { method: (opts.method ?? 'POST') as 'POST', dispatcher: opts.dispatcher, body: opts.body === undefined ? undefined : JSON.stringify(opts.body), headersTimeout: timeout, bodyTimeout: timeout, headers: { 'content-type': 'application/json', ...opts.headers } });
    const text = await res.body.text();
    let json: unknown = null;
    try { json = JSON.parse(text); } catch { /* not JSON: json stays null */ }
    return { status: res.statusCode, json };
  } catch {
    return { status: 0, json: null };
  }
}

const bearers = new Map<string, string>();
/** A repo's Authorization header, made once: an app holds its secret, it does not derive it (an HMAC) per request. */
export function bearer(rootKey: Buffer, org: string, repo: string): string {
  const key = `${rootKey.toString('hex')}:${org}/${repo}`;
  let b = bearers.get(key);
  if (!b) bearers.set(key, (b = `Bearer ${repoSecret(rootKey, org, repo)}`));
  return b;
}
