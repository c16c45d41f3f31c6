// SPEC 4.1: per-repo shared secrets derived from the runtime root key(s).
import { createHmac, timingSafeEqual } from 'node:crypto';
import { ApiError } from './errors.ts';
import { lowerAscii } from './names.ts';

/** Parses RUNTIME_ROOT_KEY: a comma list of 64+ hex digit keys; the first is current. Throws a message without the value. */
export function parseRootKeys(value: string): Buffer[] {
  const parts = value.split(',').map((p) => p.trim());
  if (parts.length === 0 || parts.some((p) => !/^(?:[0-9a-fA-F]{2}){32,}$/.test(p))) {
    throw new Error('must be a comma-separated list of keys of at least 64 hex digits (an even count)');
  }
  return parts.map((p) => Buffer.from(p, 'hex'));
}

export function repoSecret(rootKey: Buffer, org: string, repo: string): string {
  return createHmac('sha256', rootKey).update(`db:${lowerAscii(org)}/${lowerAscii(repo)}`).digest('base64url');
}

/** Derives a purpose-bound key (for internal use) so one root key never serves two protocols. */
export function deriveKey(rootKey: Buffer, purpose: string): Buffer {
  return createHmac('sha256', rootKey).update(`scopebase:${purpose}`).digest();
}

const CACHE_MAX = 10_000;
/** Expected secrets per root-key list and repo: an HMAC with a raw key costs more than the rest of a point read. */
const expectedCache = new WeakMap<readonly Buffer[], Map<string, Buffer[]>>();

function expectedSecrets(rootKeys: readonly Buffer[], org: string, repo: string): Buffer[] {
  let cache = expectedCache.get(rootKeys);
  if (!cache) {
    cache = new Map();
    expectedCache.set(rootKeys, cache);
  }
  const id = `${lowerAscii(org)}/${lowerAscii(repo)}`;
  let expected = cache.get(id);
  if (expected) {
    cache.delete(id); // keep recently used entries at the end
  } else {
    // Its own memory: a short Buffer.from is a slice of a shared 8 KiB block, which the cache would keep alive.
    expected = rootKeys.map((key) => unpooled(Buffer.from(repoSecret(key, org, repo))));
    if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value!);
  }
  cache.set(id, expected);
  return expected;
}

function unpooled(b: Buffer): Buffer {
  const own = Buffer.allocUnsafeSlow(b.length);
  b.copy(own);
  return own;
}

/** Constant-time check of a presented secret against every accepted root key. */
/** The refusal of a repo secret that is not this repo's: where the right one comes from (a key of another DATA_DIR is the usual cause). */
export function wrongSecret(org: string, repo: string): string {
  return `wrong secret for this repo: the server derives it from its own key; print it with \`npx scopebase secret ${org}/${repo}\` where the server runs (same DATA_DIR or RUNTIME_ROOT_KEY)`;
}

export function verifyRepoSecret(rootKeys: readonly Buffer[], org: string, repo: string, presented: string): boolean {
  const given = Buffer.from(presented);
  let ok = false;
  for (const expected of expectedSecrets(rootKeys, org, repo)) {
    // Length is not secret (always 43); compare all keys regardless so timing does not reveal which matched.
    if (given.length === expected.length && timingSafeEqual(given, expected)) ok = true;
  }
  return ok;
}

/**
 * SPEC 4.1's check of a repo secret, the one every route uses (database control, runtime credentials), and now before
 * the request's body is read: the 401 to answer, or null when `authorization` carries this repo's secret.
 */
export function repoSecretRefusal(rootKeys: readonly Buffer[], org: string, repo: string, authorization: string | string[] | undefined): ApiError | null {
  const token = bearerToken(typeof authorization === 'string' ? authorization : undefined);
  if (token !== null && verifyRepoSecret(rootKeys, org, repo, token)) return null;
  return new ApiError('unauthorized', token === null ? 'missing Authorization: Bearer <repo secret>' : wrongSecret(org, repo), undefined, { 'www-authenticate': 'Bearer' });
}

/** Extracts the token of an `Authorization: Bearer <token>` header, or null. */
export function bearerToken(header: string | undefined): string | null {
  if (!header) return null;
  const m = /^Bearer[ ]+([A-Za-z0-9._~+/=-]+)\s*$/i.exec(header);
  return m ? m[1]! : null;
}
