// Values of the environment as SPEC 9.1 reads them: whole numbers, URLs, and the JSON lists (mirrors, apps) and
// address lists a setting holds. A bad one throws ConfigError naming the variable.
import { isIP } from 'node:net';
import { isOrgName, isRepoName, withoutTrailingSlashes } from './names.ts';

export interface MirrorConfig { name: string; url: string; secret: string }
export interface AppRoute { url: string; requireSession: boolean }

export class ConfigError extends Error {}

export type Env = Record<string, string | undefined>;

export function fail(name: string, why: string): never {
  throw new ConfigError(`${name}: ${why}`);
}

export function int(env: Env, name: string, dflt: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  if (!/^\d+$/.test(raw)) fail(name, `must be a whole number, got ${JSON.stringify(raw.slice(0, 40))}`);
  const n = Number(raw);
  if (n < min || n > max) fail(name, `must be between ${min} and ${max}, got ${n}`);
  return n;
}

export function str(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? undefined : v;
}

export function url(env: Env, name: string): string | undefined {
  const v = str(env, name);
  if (v === undefined) return undefined;
  try {
    const u = new URL(v);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('scheme');
  } catch {
    fail(name, 'must be an http(s) URL');
  }
  return withoutTrailingSlashes(v);
}

/**
 * Where one part reaches another (DB_SERVICE_URL, ACCOUNT_SERVICE_URL, CLUSTER_ADVERTISE_URL): what the client would
 * drop is refused, never dropped in silence. `root` names what answers at the origin's root when no path is honoured.
 */
export function serviceUrl(env: Env, name: string, root?: string): string | undefined {
  const v = url(env, name);
  if (v === undefined) return undefined;
  const u = new URL(v);
  if (u.username !== '' || u.password !== '') fail(name, 'must not hold a user name or password: they would not be sent (the parts authenticate with RUNTIME_ROOT_KEY)');
  if (u.search !== '' || u.hash !== '') fail(name, `must not have a query or a fragment (${JSON.stringify((u.search + u.hash).slice(0, 40))}): they would not be sent`);
  if (root !== undefined && u.pathname !== '/') fail(name, `must be an origin like http://10.0.0.5:8081, without a path (${JSON.stringify(u.pathname.slice(0, 40))}): ${root} answers at the root of its port, and a path would not be used`);
  return v;
}

function unknownKeys(name: string, what: string, o: Record<string, unknown>, known: string[]): void {
  const extra = Object.keys(o).find((k) => !known.includes(k));
  if (extra !== undefined) fail(name, `${what}: unknown field ${JSON.stringify(extra.slice(0, 40))}; the fields are ${known.map((k) => JSON.stringify(k)).join(', ')}`);
}

/**
 * The first key given twice in one object of a JSON text that JSON.parse took, with the keys (or array indexes) of the
 * objects it sits in. JSON.parse keeps the last in silence: `{"acme/web": "http://a", "acme/web": "http://b"}` sent
 * every request to b, and a second `"requireSession": false` opened an app the first had closed.
 */
export function duplicateKey(text: string): { key: string; path: (string | number)[] } | null {
  // Per open object: its keys so far, whether a key comes next; per open array: the index of the current element.
  const open: ({ keys: Set<string>; expectKey: boolean; last: string } | { index: number })[] = [];
  const path = () => open.slice(0, -1).map((f) => ('keys' in f ? f.last : f.index));
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    const top = open.at(-1);
    if (c === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      if (top !== undefined && 'keys' in top && top.expectKey) {
        const key = JSON.parse(text.slice(i, end + 1)) as string; // escapes decoded: "a\/b" is "a/b"
        if (top.keys.has(key)) return { key, path: path() };
        top.keys.add(key);
        top.expectKey = false;
        top.last = key;
      }
      i = end;
    } else if (c === '{') open.push({ keys: new Set(), expectKey: true, last: '' });
    else if (c === '[') open.push({ index: 0 });
    else if (c === '}' || c === ']') open.pop();
    else if (c === ',' && top !== undefined) {
      if ('keys' in top) top.expectKey = true;
      else top.index++;
    }
  }
  return null;
}

/** Why a Standard Webhooks secret is refused, or null: a short key was told "not whsec_<base64>", which it was. */
export function whsecProblem(secret: string): string | null {
  if (!/^whsec_[A-Za-z0-9+/]+={0,2}$/.test(secret)) return 'must be in Standard Webhooks form whsec_<base64>, e.g. whsec_$(openssl rand -base64 24)';
  if (Buffer.from(secret.slice(6), 'base64').length < 12) return 'is too short: whsec_ then the base64 of at least 12 random bytes (24 to 64 are usual), e.g. whsec_$(openssl rand -base64 24)';
  return null;
}

/** Why `serve mirror` needs MIRROR_SOURCE_URL (`start` takes snapshots from its own proxy); also checked at wiring. */
export const MIRROR_SOURCE_REQUIRED = 'MIRROR_SOURCE_URL: required to run the reference mirror alone (without it every event is answered 503): the address of the proxy it takes snapshots from (SPEC 6), e.g. http://127.0.0.1:8080';

export function mirrorSource(env: Env, required: boolean): string | null {
  const source = serviceUrl(env, 'MIRROR_SOURCE_URL') ?? null;
  if (source === null && required) throw new ConfigError(MIRROR_SOURCE_REQUIRED);
  return source;
}

export function parseMirrors(raw: string | undefined): MirrorConfig[] {
  if (raw === undefined) return [];
  let list: unknown;
  try {
    list = JSON.parse(raw);
  } catch {
    fail('DB_MIRRORS', 'must be a JSON array of {"name","url","secret"}');
  }
  if (!Array.isArray(list)) fail('DB_MIRRORS', 'must be a JSON array of {"name","url","secret"}');
  const twice = duplicateKey(raw);
  if (twice) fail('DB_MIRRORS', `entry ${twice.path[0]}: field ${JSON.stringify(twice.key.slice(0, 40))} is given twice (JSON keeps only the last, in silence): give each field once`);
  const names = new Set<string>();
  return list.map((m: unknown, i) => {
    const o = m as Record<string, unknown>;
    if (typeof o !== 'object' || o === null || typeof o.name !== 'string' || typeof o.url !== 'string' || typeof o.secret !== 'string') {
      fail('DB_MIRRORS', `entry ${i} must be {"name","url","secret"} with string values`);
    }
    unknownKeys('DB_MIRRORS', `entry ${i}`, o, ['name', 'url', 'secret']);
    if (!/^[A-Za-z0-9._-]{1,64}$/.test(o.name)) fail('DB_MIRRORS', `entry ${i}: name must match ^[A-Za-z0-9._-]{1,64}$`);
    if (names.has(o.name)) fail('DB_MIRRORS', `entry ${i}: duplicate name ${JSON.stringify(o.name)}`);
    names.add(o.name);
    url({ [`DB_MIRRORS: entry ${i}: url`]: o.url }, `DB_MIRRORS: entry ${i}: url`);
    const bad = whsecProblem(o.secret);
    if (bad) fail('DB_MIRRORS', `entry ${i}: secret ${bad}`);
    return { name: o.name, url: o.url, secret: o.secret };
  });
}

export function parseApps(raw: string | undefined): Map<string, AppRoute> {
  const apps = new Map<string, AppRoute>();
  if (raw === undefined) return apps;
  let obj: unknown;
  try {
    obj = JSON.parse(raw);
  } catch {
    fail('APPS', 'must be a JSON object {"org/repo": "http://upstream" | {"url", "requireSession"}}');
  }
  if (typeof obj !== 'object' || obj === null || Array.isArray(obj)) fail('APPS', 'must be a JSON object');
  const twice = duplicateKey(raw);
  if (twice) {
    const key = JSON.stringify(twice.key.slice(0, 170));
    fail('APPS', twice.path.length === 0
      ? `key ${key} is given twice (JSON keeps only the last, in silence): give each org/repo once`
      : `value of ${twice.path[0]}: field ${key} is given twice (JSON keeps only the last, in silence): give each field once`);
  }
  for (const [key, value] of Object.entries(obj)) {
    // A key no request can reach (a name SPEC 2 refuses) would configure an app that never answers.
    const [org, repo, ...more] = key.split('/');
    if (more.length || !isOrgName(org!) || !isRepoName(repo ?? '')) fail('APPS', `key ${JSON.stringify(key)} must be "org/repo" in lowercase, with names as SPEC 2 allows them`);
    const v = typeof value === 'string' ? { url: value, requireSession: false } : (value as Record<string, unknown>);
    if (typeof v !== 'object' || v === null || typeof v.url !== 'string') fail('APPS', `value of ${key} must be a URL or {"url", "requireSession"}`);
    // A misspelt "requireSession" must not leave the app open to anonymous visitors without a word.
    unknownKeys('APPS', `value of ${key}`, v, ['url', 'requireSession']);
    if (v.requireSession !== undefined && typeof v.requireSession !== 'boolean') fail('APPS', `requireSession of ${key} must be true or false`);
    const target = url({ APPS: v.url }, 'APPS')!;
    // Requests go to the URL's origin and path: a query, fragment or user:password there would be dropped in silence.
    const u = new URL(target);
    if (u.username !== '' || u.password !== '') fail('APPS', `the URL of ${key} must not hold a user name or password: they would not be sent to the app`);
    if (u.search !== '' || u.hash !== '') fail('APPS', `the URL of ${key} must not have a query or a fragment (${JSON.stringify((u.search + u.hash).slice(0, 40))}): each request's own path and query go under the URL's path`);
    apps.set(key, { url: target, requireSession: v.requireSession === true });
  }
  return apps;
}

export function parseTrustedProxies(raw: string | undefined): string[] {
  if (raw === undefined) return [];
  return raw.split(',').map((p) => p.trim()).filter(Boolean).map((p) => {
    const [addr, bits, ...more] = p.split('/');
    const family = isIP(addr ?? '');
    const max = family === 4 ? 32 : 128;
    if (!family || more.length > 0 || (bits !== undefined && (!/^\d+$/.test(bits) || Number(bits) > max))) {
      fail('TRUSTED_PROXIES', `${JSON.stringify(p)} is not an IP address or CIDR`);
    }
    return p;
  });
}

