// What every fuzz lane sends and what must hold of every reply: no 500 and no 5xx but 503 with Retry-After; every
// error in SPEC 3's shape (JSON, or an HTML page for a browser); an answer within 15 s.
import { Agent, request } from 'undici';
import { http } from '../lib/http.ts';

export const agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 });

/** One generated request: `base` names the listener it goes to (the proxy, the admin port, the reference mirror). */
export interface Req { method: string; base: string; path: string; headers: Record<string, string>; body?: string | Buffer }
export interface Reply { status: number; type: string; text: string; headers: Record<string, string | string[] | undefined> }
export interface Failure { req: string; status: number; why: string }

/** Headers undici refuses or replaces (`connection`, `keep-alive`, …): a request with them goes through node:http. */
const HOP_BY_HOP = /^(connection|keep-alive|te|trailer|upgrade|proxy-connection)$/i;

export async function send(bases: Record<string, string>, r: Req, timeoutMs = 15_000): Promise<Reply> {
  const url = `${bases[r.base]}${r.path.startsWith('/') ? r.path : `/${r.path}`}`;
  if (Object.keys(r.headers).some((h) => HOP_BY_HOP.test(h))) {
    // node:http frames a body of DELETE or OPTIONS only with a content-length (no chunking by default for them).
    const headers = r.body === undefined ? r.headers : { ...r.headers, 'content-length': String(Buffer.byteLength(r.body)) };
    const res = await http(url, { method: r.method, headers, body: r.body, timeoutMs });
    return { status: res.status, type: String(res.headers['content-type'] ?? ''), text: res.body, headers: res.headers };
  }
  const res = await request(url, {
    method: r.method as 'GET', headers: r.headers, body: r.body, dispatcher: agent, headersTimeout: timeoutMs, bodyTimeout: timeoutMs,
  });
  const text = r.method === 'HEAD' ? '' : await res.body.text();
  return { status: res.statusCode, type: String(res.headers['content-type'] ?? ''), text, headers: res.headers };
}

/** Why a reply breaks SPEC 3, or null. */
export function judge(r: Req, res: Reply): string | null {
  if (res.status >= 500 && !(res.status === 503 && res.headers['retry-after'])) return `${res.status}: ${res.text.slice(0, 200)}`;
  if (res.status < 400 || r.method === 'HEAD') return null;
  if (res.type.startsWith('text/html')) return /<html/i.test(res.text) ? null : 'an HTML error without a page';
  if (!res.type.includes('json')) return `an error as ${res.type || 'no content type'}: ${res.text.slice(0, 120)}`;
  try {
    const e = (JSON.parse(res.text) as { error?: { code?: unknown; message?: unknown } }).error;
    return typeof e?.code === 'string' && typeof e.message === 'string' && e.message.length > 0 ? null : `not SPEC 3's shape: ${res.text.slice(0, 120)}`;
  } catch {
    return `an error whose body is not JSON: ${res.text.slice(0, 120)}`;
  }
}

/** The code of a SPEC 3 error body, or undefined. */
export function errorCode(res: Reply): string | undefined {
  try {
    return (JSON.parse(res.text) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}

export const describe = (r: Req) => `${r.method} (${r.base}) ${r.path.slice(0, 120)}`;

/** The shape of a request, for a failure without an answer: header names and sizes, body size. */
export const shape = (r: Req) => `headers ${Object.entries(r.headers).map(([k, v]) => `${k}:${v.length}`).join(' ')}; body ${r.body === undefined ? 'none' : Buffer.byteLength(r.body)}`;

/** After a request got no answer: the same request once more, to tell a request that hangs from a connection that did. */
export async function again(bases: Record<string, string>, r: Req): Promise<string> {
  const t0 = performance.now();
  try {
    const res = await send(bases, r);
    return `; sent again: ${res.status} in ${(performance.now() - t0).toFixed(0)} ms`;
  } catch (e) {
    return `; sent again: no answer either (${(e as Error).message})`;
  }
}

/**
 * A request with a large body refused from its headers is answered at once with `Connection: close`, its body never
 * read (src/shared/body-budget.ts): a client still sending may see the connection end (EPIPE, a reset) before it
 * reads the answer, the race every HTTP server that stops reading has. Not a failure when the same request, sent
 * again, is answered below 500.
 */
export function closedWhileSending(r: Req, e: unknown, sentAgain: string): boolean {
  const large = r.body !== undefined && Buffer.byteLength(r.body) > 16 * 1024;
  return large && /EPIPE|ECONNRESET|other side closed|socket hang up/.test(String((e as Error)?.message)) && /^; sent again: [1-4]\d\d /.test(sentAgain);
}

