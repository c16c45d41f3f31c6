// SPEC 9.1, keys and secrets: read from the environment, generated once into DATA_DIR for development, and under
// NODE_ENV=production required, every missing one named in one message.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { parseRootKeys } from './secrets.ts';
import { ConfigError, fail, str, whsecProblem, type Env } from './config-values.ts';

/** RUNTIME_ROOT_KEY; generated into DATA_DIR when unset in development. */
export function rootKeys(env: Env, dataDir: string, production: boolean, generated: string[]): Buffer[] {
  return keyList(env, 'RUNTIME_ROOT_KEY', dataDir, production, 'runtime-root.key', parseRootKeys, generated);
}

/** ACCOUNT_ENCRYPTION_KEYS; generated like RUNTIME_ROOT_KEY only for a part that signs in (`signsIn`). */
export function encryptionKeys(env: Env, dataDir: string, production: boolean, signsIn: boolean, generated: string[]): Buffer[] {
  const name = 'ACCOUNT_ENCRYPTION_KEYS';
  return signsIn ? keyList(env, name, dataDir, production, 'account-encryption.key', parseEncryptionKeys, generated) : givenKeys(env, name, parseEncryptionKeys);
}

function keyList(env: Env, name: string, dataDir: string, production: boolean, file: string, check: (v: string) => Buffer[], generated: string[]): Buffer[] {
  const raw = str(env, name);
  if (raw !== undefined) {
    try {
      return check(raw);
    } catch (e) {
      fail(name, (e as Error).message);
    }
  }
  if (production) fail(name, 'is required when NODE_ENV=production (no development key is generated)');
  // Development: generate once into DATA_DIR, reuse after.
  generated.push(name);
  const path = join(dataDir, file);
  if (!existsSync(path)) {
    try {
      mkdirSync(dataDir, { recursive: true });
      writeFileSync(path, randomBytes(32).toString('hex') + '\n', { mode: 0o600, flag: 'wx' });
    } catch (e) {
      fail('DATA_DIR', `cannot write the development key ${path} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}): give a folder this user may write, or set ${name}`);
    }
  }
  try {
    return check(readFileSync(path, 'utf8').trim());
  } catch (e) {
    fail(name, `the generated key file ${path} is damaged: ${(e as Error).message}`);
  }
}

/** MIRROR_SECRET, checked here so that a start stops before any part listens (it did once the proxy was up). */
export function mirrorSecret(env: Env, required: boolean): string | null {
  const secret = str(env, 'MIRROR_SECRET');
  if (secret === undefined && required) fail('MIRROR_SECRET', 'required to run the reference mirror (the whsec_ secret its DB_MIRRORS entry uses)');
  const bad = secret === undefined ? null : whsecProblem(secret);
  if (bad) fail('MIRROR_SECRET', bad);
  return secret ?? null;
}

/** A key list a part does not use: checked when set (a typo is still named), never generated nor required. */
function givenKeys(env: Env, name: string, check: (v: string) => Buffer[]): Buffer[] {
  const raw = str(env, name);
  if (raw === undefined) return [];
  try {
    return check(raw);
  } catch (e) {
    fail(name, (e as Error).message);
  }
}

function parseEncryptionKeys(value: string): Buffer[] {
  const parts = value.split(',').map((p) => p.trim());
  if (parts.some((p) => !/^[0-9a-fA-F]{64}$/.test(p))) throw new Error('must be a comma-separated list of keys of exactly 64 hex digits');
  return parts.map((p) => Buffer.from(p, 'hex'));
}

/** Under NODE_ENV=production, every required setting that is missing, in one message rather than one per start. */
export function requireForProduction(env: Env, noProvider: boolean, encryption: boolean): void {
  const keys = [['RUNTIME_ROOT_KEY', '64+ hex digits'], ...(encryption ? [['ACCOUNT_ENCRYPTION_KEYS', '64 hex digits each']] : [])].filter(([name]) => str(env, name!) === undefined);
  const missing = [
    ...(noProvider ? ['ACCOUNT_OIDC_ISSUER (with ACCOUNT_OIDC_CLIENT_ID) or ACCOUNT_GITHUB_CLIENT_ID (with ACCOUNT_GITHUB_CLIENT_SECRET), a sign-in provider'] : []),
    ...keys.map(([name, what]) => `${name} (${what})`),
  ];
  if (missing.length > 1) throw new ConfigError(`NODE_ENV=production needs ${missing.length} settings that are missing: ${missing.join('; ')}; nothing is generated or run for development under NODE_ENV=production (docs/deploy.md)`);
  if (noProvider) fail('ACCOUNT_OIDC_ISSUER', 'no sign-in provider is configured: set ACCOUNT_OIDC_ISSUER (with ACCOUNT_OIDC_CLIENT_ID) or ACCOUNT_GITHUB_CLIENT_ID (with ACCOUNT_GITHUB_CLIENT_SECRET); the development identity provider does not run under NODE_ENV=production');
  // One key alone: keyList names it as before.
}
