// The soak's sign-in operation: the full OAuth / OIDC round trip through the proxy against a real issuer in its own
// process (bench/soak/idp.ts) — GET /{repo}/_account/login (302 to the issuer, a login-binding cookie) → the
// issuer's /authorize (302 back with code and state) → GET /{repo}/_account/callback (the product exchanges the
// code at the issuer's token endpoint, checks the ID token and nonce, reads userinfo; 302 with the session cookie)
// → GET /{repo}/_account/verify with that cookie, which must answer 200 for the signed-in user in the org the
// sign-in was made on. A step that answers 503 (shedding, SPEC 3) ends the op with that status; anything else
// unexpected is a failure, reported through `fail`.
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { request, type Dispatcher } from 'undici';
import { cookieName, SESSION_COOKIE } from '../../src/account/cookies.ts';

const SOAK_EMAIL = 'soak@example.test';
const SESSION = `${cookieName(SESSION_COOKIE, false)}=`;

export interface SoakIdp { issuer: string; env: Record<string, string>; stop(): void }

/** Forks the issuer; `env` configures the product for it, with the sign-in rate limit (per client address, and the
 * whole soak is one address: 127.0.0.1) raised out of the way — ACCOUNT_LOGIN_RATE_BURST / _PER_MINUTE, docs/accounts.md. */
export async function startIdp(): Promise<SoakIdp> {
  const child = fork(fileURLToPath(new URL('./idp.ts', import.meta.url)), { env: { ...process.env, SOAK_EMAIL } });
  const issuer = await new Promise<string>((resolve, reject) => {
    child.once('message', (m: { issuer: string }) => resolve(m.issuer));
    child.once('exit', (code) => reject(new Error(`the identity provider exited (${code})`)));
  });
  const env = { ACCOUNT_OIDC_ISSUER: issuer, ACCOUNT_OIDC_CLIENT_ID: 'scopebase-soak', ACCOUNT_OIDC_CLIENT_SECRET: 'soak-secret', ACCOUNT_LOGIN_RATE_BURST: '100000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '1000000' };
  return { issuer, env, stop: () => child.kill() };
}

interface Hop { status: number; location: string | null; cookies: string[]; json: any } // eslint-disable-line @typescript-eslint/no-explicit-any

async function get(url: string, dispatcher: Dispatcher, headers: Record<string, string>): Promise<Hop> {
  const res = await request(url, { dispatcher, headers, headersTimeout: 30_000, bodyTimeout: 30_000 });
  const text = await res.body.text();
  const set = res.headers['set-cookie'];
  const cookies = (set === undefined ? [] : Array.isArray(set) ? set : [set]).map((c) => c.split(';')[0]!);
  let json: unknown = null;
  try { json = JSON.parse(text); } catch { /* a page or empty */ }
  const loc = res.headers.location;
  return { status: res.statusCode, location: typeof loc === 'string' ? loc : null, cookies, json };
}

/** One sign-in on `org` (repo r0) through the proxy at `proxyUrl`; resolves to the status the op is counted under. */
export async function signInOnce(o: { proxyUrl: string; host: string; org: string; dispatcher: Dispatcher; fail: (why: string) => void }): Promise<number> {
  const headers = (cookies: string[]) => ({ host: o.host, ...(cookies.length ? { cookie: cookies.join('; ') } : {}) });
  const stop = (step: string, h: Hop): number => {
    // The whole answer: the caller tells an excused failure by its reason, which a cut could leave out.
    if (h.status !== 503 && h.status !== 0) o.fail(`sign-in ${step} answered ${h.status} ${JSON.stringify(h.json)?.slice(0, 1000)}`);
    return h.status;
  };
  try {
    const login = await get(`${o.proxyUrl}/r0/_account/login`, o.dispatcher, headers([]));
    if (login.status !== 302 || !login.location) return stop('/login', login);
    const authorize = await get(login.location, o.dispatcher, {});
    const back = authorize.location ? new URL(authorize.location) : null;
    if (authorize.status !== 302 || !back || back.host !== o.host || back.pathname !== '/r0/_account/callback') return stop('the issuer\'s /authorize', authorize);
    const callback = await get(`${o.proxyUrl}${back.pathname}${back.search}`, o.dispatcher, headers(login.cookies));
    const session = callback.cookies.find((c) => c.startsWith(SESSION) && c.length > SESSION.length);
    if (callback.status !== 302 || !session) return stop('/callback', callback);
    const verify = await get(`${o.proxyUrl}/r0/_account/verify`, o.dispatcher, headers([session]));
    if (verify.status !== 200) return stop('/verify with the new session', verify);
    if (verify.json?.org !== o.org || verify.json?.user?.email !== SOAK_EMAIL) o.fail(`sign-in on ${o.org}: /verify answered ${JSON.stringify(verify.json).slice(0, 200)}`);
    return 200;
  } catch (e) {
    o.fail(`sign-in on ${o.org}: ${(e as Error).message}`);
    return 0;
  }
}
