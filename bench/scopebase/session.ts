// The session for the /verify workload: a real sign-in through the product's development identity provider over HTTP,
// done the way a browser does it (redirects followed by hand, the provider's form submitted, cookies kept per host).
// Self-contained (only type imports) so tests can share the flow: test/account-standalone.test.ts signs in with it.
import { Agent, request, type Dispatcher } from 'undici';
import type { Instance } from './instance.ts';

export interface SignInOptions {
  /** Where the proxy listens, e.g. http://127.0.0.1:8080 (org hosts do not resolve, so we connect here). */
  proxyUrl: string;
  /** The org host the browser uses, e.g. acme.localhost:8080 (sent as Host). */
  host: string;
  repo: string;
  email?: string;
  name?: string;
  returnTo?: string;
  /** Cookies already held (e.g. from an earlier sign-in); the flow adds to it. */
  jar?: CookieJar;
  timeoutMs?: number;
}

export interface SignedInOverHttp {
  /** The `Cookie` header value carrying only the session cookie, e.g. `session=...`. */
  cookie: string;
  /** Where the callback sent the browser (return_to, resolved against the org host). */
  location: string;
  jar: CookieJar;
}

interface StoredCookie { value: string; path: string }

/** Cookies per host name (ports do not separate cookies in browsers), with Path matching and Max-Age=0 deletion. */
export class CookieJar {
  readonly hosts = new Map<string, Map<string, StoredCookie>>();

  store(url: URL, setCookie: string | string[] | undefined): void {
    for (const line of setCookie === undefined ? [] : Array.isArray(setCookie) ? setCookie : [setCookie]) {
      const [pair = '', ...attrs] = line.split(';');
      const eq = pair.indexOf('=');
      if (eq <= 0) continue;
      const name = pair.slice(0, eq).trim();
      const value = pair.slice(eq + 1).trim();
      let path = url.pathname.replace(/\/[^/]*$/, '') || '/';
      let expired = false;
      for (const attr of attrs) {
        const [k = '', v = ''] = attr.split('=').map((s) => s.trim());
        if (/^path$/i.test(k) && v.startsWith('/')) path = v;
        if (/^max-age$/i.test(k) && Number(v) <= 0) expired = true;
        if (/^expires$/i.test(k) && Date.parse(v) <= Date.now()) expired = true;
      }
      let cookies = this.hosts.get(url.hostname);
      if (!cookies) this.hosts.set(url.hostname, (cookies = new Map()));
      if (expired) cookies.delete(name);
      else cookies.set(name, { value, path });
    }
  }

  /** The Cookie header for `url`, or undefined. */
  header(url: URL): string | undefined {
    const cookies = this.hosts.get(url.hostname);
    if (!cookies) return undefined;
    const sent = [...cookies].filter(([, c]) => c.path === '/' || url.pathname === c.path || url.pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`));
    return sent.length ? sent.map(([k, c]) => `${k}=${c.value}`).join('; ') : undefined;
  }

  get(hostname: string, name: string): string | undefined {
    return this.hosts.get(hostname)?.get(name)?.value;
  }
}

interface Hop { status: number; url: URL; location: URL | null; text: string; headers: Dispatcher.ResponseData['headers'] }

// Messages name the step, status and path only: URLs of this flow carry codes and state in their query strings.
function where(u: URL): string {
  return `${u.origin}${u.pathname}`;
}

/** Signs in on (org host, repo) through the proxy and the development identity provider; throws if any step fails. */
export async function signInOverHttp(opts: SignInOptions): Promise<SignedInOverHttp> {
  const jar = opts.jar ?? new CookieJar();
  const origin = `http://${opts.host}`;
  const orgHost = new URL(origin).hostname;
  const timeout = opts.timeoutMs ?? 15_000;
  const dispatcher = new Agent({ connect: { timeout }, headersTimeout: timeout, bodyTimeout: timeout });

  const fetchHop = async (url: URL, init: { method?: 'GET' | 'POST'; form?: URLSearchParams } = {}): Promise<Hop> => {
    // The org host does not resolve: connect to the proxy and name the host ourselves. Other hosts (the provider on
    // 127.0.0.1) are reached directly.
    const target = url.hostname === orgHost ? new URL(url.pathname + url.search, opts.proxyUrl) : url;
    const headers: Record<string, string> = { host: url.host, accept: 'text/html,application/xhtml+xml', 'user-agent': 'scopebase-bench' };
    const cookie = jar.header(url);
    if (cookie) headers.cookie = cookie;
    const body = init.form?.toString();
    if (body !== undefined) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      headers.origin = url.origin;
    }
    const res = await request(target, { method: init.method ?? 'GET', headers, body, dispatcher });
    const text = await res.body.text();
    jar.store(url, res.headers['set-cookie']);
    const loc = res.headers.location;
    return { status: res.statusCode, url, location: typeof loc === 'string' ? new URL(loc, url) : null, text, headers: res.headers };
  };
  const fail = (step: string, hop: Hop): Error =>
    new Error(`sign-in: ${step}: HTTP ${hop.status} from ${where(hop.url)}${hop.location ? ` to ${where(hop.location)}` : ''}`);

  try {
    const qs = opts.returnTo === undefined ? '' : `?${new URLSearchParams({ return_to: opts.returnTo })}`;
    let hop = await fetchHop(new URL(`/${opts.repo}/_account/login${qs}`, origin));
    if (hop.status !== 302 || !hop.location) throw fail('/login did not redirect to the provider', hop);
    const callbackPath = `/${opts.repo}/_account/callback`;
    let submitted = false;
    for (let hops = 0; ; hops++) {
      if (hops > 12) throw fail('too many redirects', hop);
      if (hop.location) {
        if (hop.status < 300 || hop.status > 399) throw fail('unexpected answer', hop);
        const next = hop.location;
        hop = await fetchHop(next);
        if (next.hostname === orgHost && next.pathname === callbackPath) break;
        continue;
      }
      // A page without a redirect: the provider's sign-in form. Submit it as a browser would (its own action URL).
      const form = /<form\b[^>]*\bmethod="post"[^>]*\baction="([^"]+)"/i.exec(hop.text) ?? /<form\b[^>]*\baction="([^"]+)"[^>]*\bmethod="post"/i.exec(hop.text);
      if (hop.status !== 200 || !form || submitted) throw fail('no sign-in form', hop);
      submitted = true;
      const action = new URL(form[1]!.replace(/&amp;/g, '&'), hop.url);
      hop = await fetchHop(action, { method: 'POST', form: new URLSearchParams({ email: opts.email ?? 'bench@example.com', name: opts.name ?? 'Bench User' }) });
    }
    if (hop.status !== 302 || !hop.location) throw fail('the callback did not sign in', hop);
    const sessionName = ['__Host-session', 'session'].find((n) => jar.get(orgHost, n) !== undefined);
    if (!sessionName) throw fail('the callback set no session cookie', hop);
    return { cookie: `${sessionName}=${jar.get(orgHost, sessionName)}`, location: hop.location.href, jar };
  } finally {
    await dispatcher.close();
  }
}

/** The `Cookie` header value of a fresh session on the instance's org host (`session=<token>`). */
export async function obtainSessionCookie(inst: Instance, repo: string): Promise<string> {
  return (await signInOverHttp({ proxyUrl: inst.proxyUrl, host: inst.host, repo })).cookie;
}
