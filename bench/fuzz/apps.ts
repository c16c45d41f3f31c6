// The fuzz's apps lane: generated requests to apps (APPS) with a real app server behind the proxy
// (bench/fuzz/upstream.ts, its own process) — any path, method, query, body; spoofed identity, internal and
// forwarding headers in every spelling; hop-by-hop headers; huge headers; a real session cookie or none; an app that
// answers slowly, resets, never answers, or is down. What must hold besides SPEC 3 on the proxy's own replies:
//   - no client copy of a header only the proxy sets reaches the app (the app's echo, and its own record);
//   - the session cookie never reaches the app; with a session the app gets x-auth-user-id of that user;
//   - the app's reply passes through: its status, its headers (but not a hop-by-hop one), its body;
//   - an app that is down or resets before answering gives 503 `unavailable` with Retry-After, never a 500 or a hang.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { errorCode, judge, type Reply, type Req } from './judge.ts';
import { MARK, NEVER_FROM_CLIENT, type UpstreamReport } from './upstream.ts';

export interface AppsUpstream { url: string; report(): Promise<UpstreamReport>; stop(): void }

export async function startUpstream(): Promise<AppsUpstream> {
  const child = fork(fileURLToPath(new URL('./upstream.ts', import.meta.url)));
  const port = await new Promise<number>((r) => child.once('message', (m: { port: number }) => r(m.port)));
  return {
    url: `http://127.0.0.1:${port}`,
    report: () => new Promise((r) => { child.once('message', r); child.send({ report: true }); }),
    stop: () => child.kill(),
  };
}

/** APPS for the fuzz: an open app, one that requires a session (same upstream), one whose upstream is down. */
export function appsEnv(upstream: string, downUrl: string): string {
  return JSON.stringify({ 'acme/app': upstream, 'acme/private': { url: upstream, requireSession: true }, 'acme/down': downUrl });
}

const SPOOF_NAMES = ['x-scopebase-org', 'x-scopebase-repo', 'x-scopebase-user-id', 'X-Scopebase-Anything', 'x_scopebase_org', 'x-auth-user-id', 'x-auth-user-email', 'X_AUTH_USER_ID', 'x-auth-user', 'x-auth-request-user',
  'x-auth-request-email', 'remote-user', 'x-remote-user', 'Remote_User', 'x-webauth-user', 'x-user', 'X-User-Id', 'x-original-url', 'X_Rewrite_URL', 'x-email', 'x-org', 'x-repo', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-prefix',
  'x_forwarded_for', 'forwarded', 'x-real-ip', 'proxy-authorization', 'keep-alive'];
const PATHS = ['', '/', '/x', '/a/b?c=d', '/slow/a', '/reset', '/reset-mid', '/status/404', '/status/500', '/status/503', '/status/204', '/status/302', '/status/418', '/big', '/%2e%2e/x', '/..%2f..%2fetc/passwd',
  '//evil.example/x', '/\\evil.example', '/a/../../b', '/_db/status', '/_account/verify', '/_dbx', '/%00', '/é', '/a%zz'];

export interface AppReq extends Req { app: string; session: boolean; spoofed: string[]; rest: string }

export function appRequest(host: string, sessionCookie: string): fc.Arbitrary<AppReq> {
  return fc.record({
    app: fc.oneof({ weight: 6, arbitrary: fc.constant('app') }, { weight: 2, arbitrary: fc.constant('private') }, { weight: 1, arbitrary: fc.constantFrom('down', 'APP', 'app.', 'nope') }),
    rest: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...PATHS) }, { weight: 1, arbitrary: fc.webPath().map((p) => (p.startsWith('/') ? p : `/${p}`)) }),
    query: fc.oneof({ weight: 3, arbitrary: fc.constant('') }, { weight: 1, arbitrary: fc.constantFrom('?a=1&a=2', '?%zz', `?q=${'q'.repeat(6000)}`, '?return_to=//evil.example') }, { weight: 1, arbitrary: fc.webQueryParameters().map((q) => `?${q}`) }),
    method: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('GET', 'POST') }, { weight: 1, arbitrary: fc.constantFrom('PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'PROPFIND', 'PURGE') }),
    spoof: fc.subarray(SPOOF_NAMES, { maxLength: 8 }),
    hop: fc.boolean(),
    session: fc.oneof({ weight: 2, arbitrary: fc.constant('none') }, { weight: 2, arbitrary: fc.constant('valid') }, { weight: 1, arbitrary: fc.constantFrom('garbage', 'valid+other') }),
    accept: fc.constantFrom(undefined, 'application/json', 'text/html', '*/*'),
    big: fc.constantFrom(0, 0, 0, 0, 0, 0, 0, 0, 12_000, 40_000),
    many: fc.boolean().map((b) => b && Math.random() < 0.05),
    body: fc.option(fc.oneof(fc.string({ maxLength: 300 }), fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)), fc.constant('z'.repeat(1_500_000))), { nil: undefined }),
  }).map((g): AppReq => {
    const headers: Record<string, string> = { host, 'x-fuzz-echo': 'passes' };
    g.spoof.forEach((name, i) => { headers[name] = `${MARK}${i}`; });
    if (g.hop) Object.assign(headers, { connection: 'x-hop', 'x-hop': `${MARK}hop` });
    if (g.session !== 'none') headers.cookie = { valid: sessionCookie, garbage: `session=${MARK}garbage`, 'valid+other': `theme=dark; ${sessionCookie}; lang=en` }[g.session]!;
    if (g.accept) headers.accept = g.accept;
    if (g.big) headers['x-padding'] = 'p'.repeat(g.big);
    if (g.many) for (let i = 0; i < 150; i++) headers[`x-many-${i}`] = String(i);
    const withBody = g.body !== undefined && g.method !== 'GET' && g.method !== 'HEAD';
    return { base: 'proxy', method: g.method, path: `/${g.app}${g.rest}${g.query}`, headers, ...(withBody ? { body: g.body } : {}), app: g.app, rest: g.rest, session: g.session.startsWith('valid'), spoofed: g.spoof };
  });
}

/** Why a reply to an app request is wrong, or null. `reply` is null when the connection ended without a full answer. */
export function judgeApp(r: AppReq, reply: Reply | null, error: string | null, userId: string, sessionToken: string): string | null {
  const fromApp = reply?.headers['x-upstream'] === '1';
  if (!reply) return r.rest === '/reset-mid' ? null : `no answer: ${error}`;
  if (!fromApp) {
    const bad = judge(r, reply);
    if (bad) return bad;
    // Only plain paths: others may be refused first (a malformed path), climb to another repo, or be reserved.
    const plain = /^(\/?|\/(x|slow\/a|reset|status\/\d+|big|a\/b\?c=d))$/.test(r.rest);
    if (plain && (r.app === 'down' || (r.rest === '/reset' && (r.app === 'app' || (r.app === 'private' && r.session)))) && (reply.status < 400 || reply.status >= 500)) {
      const unavailable = errorCode(reply) === 'unavailable' || reply.type.startsWith('text/html') || r.method === 'HEAD';
      return reply.status === 503 && unavailable ? null : `an app down or resetting answered ${reply.status} ${reply.text.slice(0, 160)}, not 503 unavailable`;
    }
    return null;
  }
  if (r.app === 'private' && !r.session) return 'an app that requires a session got an anonymous request';
  if (reply.headers['x-app-header'] !== 'kept') return 'the app\'s own header did not pass through';
  if (reply.headers['x-drop-me'] !== undefined) return 'a hop-by-hop header of the app (named in its Connection) reached the client';
  const wanted = /^\/status\/(\d{3})/.exec(r.rest)?.[1];
  if (wanted && reply.status !== Number(wanted)) return `the app answered ${wanted}, the client got ${reply.status}`;
  if (r.method === 'HEAD' || reply.status === 204 || reply.status === 304 || r.rest === '/big') return null;
  let echo: { method: string; url: string; headers: Record<string, string> };
  try {
    echo = JSON.parse(reply.text);
  } catch {
    return `the app's body did not pass through intact: ${reply.text.slice(0, 100)}`;
  }
  if (echo.method !== r.method) return `the app got ${echo.method} for ${r.method}`;
  if (echo.headers['x-fuzz-echo'] !== 'passes') return 'an end-to-end header did not reach the app';
  for (const [name, value] of Object.entries(echo.headers)) {
    if (NEVER_FROM_CLIENT.test(name.replaceAll('_', '-')) && String(value).includes(MARK)) return `the client's ${name} reached the app`;
  }
  if (String(echo.headers.cookie ?? '').includes(sessionToken)) return 'the session cookie reached the app';
  const user = echo.headers['x-auth-user-id'];
  if (r.session ? user !== userId : user !== undefined) return `x-auth-user-id at the app: ${user} (session: ${r.session})`;
  if (/(^|\/)\.\.(\/|$)/.test(echo.url.split('?')[0]!)) return `the app got a path that climbs: ${echo.url}`;
  return null;
}
