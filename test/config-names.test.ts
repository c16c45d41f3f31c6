// A setting with a typo must not silently do nothing: unknown DB_/ACCOUNT_/MIRROR_ variables are named at start,
// with the closest real one; every variable README documents is one the configuration reads.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { loadConfig } from '../src/shared/config.ts';
import { spawnProduct, tempDir, testEnv } from './helpers/product.ts';

test('a typo is named with the closest known variable; a far-off name gets no guess', () => {
  const config = loadConfig(testEnv(tempDir(), { DB_SYNCC: 'normal', ACCOUNT_SESION_TTL: '1d', MIRROR_ZEBRA: '1', UNRELATED_THING: 'x' }));
  assert.deepEqual(config.warnings, [
    'ACCOUNT_SESION_TTL is not a scopebase setting and does nothing; did you mean ACCOUNT_SESSION_TTL?',
    'DB_SYNCC is not a scopebase setting and does nothing; did you mean DB_SYNC?',
    'MIRROR_ZEBRA is not a scopebase setting and does nothing',
  ]);
  assert.equal(config.db.sync, 'full', 'the typo did not set DB_SYNC');
});

test('a near miss of a setting without a product prefix is named too; the rest of the environment is left alone', () => {
  const config = loadConfig(testEnv(tempDir(), { MAX_CONECTIONS: '10', SHUTDOWN_TIMEOUT: '5', TRUSTED_PROXY: '10.0.0.1', MAX_CONNECTIONS_X: '1', HOSTNAME: 'box', DATA: 'x', DEV_IDP_PROT: '9000' }));
  assert.deepEqual(config.warnings, [
    'DEV_IDP_PROT is not a scopebase setting and does nothing; did you mean DEV_IDP_PORT?',
    'MAX_CONECTIONS is not a scopebase setting and does nothing; did you mean MAX_CONNECTIONS?',
    'MAX_CONNECTIONS_X is not a scopebase setting and does nothing; did you mean MAX_CONNECTIONS?',
    'SHUTDOWN_TIMEOUT is not a scopebase setting and does nothing; did you mean SHUTDOWN_TIMEOUT_MS?',
    'TRUSTED_PROXY is not a scopebase setting and does nothing; did you mean TRUSTED_PROXIES?',
  ]);
});

test('every DB_, ACCOUNT_ and MIRROR_ variable in README is one the configuration reads', () => {
  const readme = readFileSync('README.md', 'utf8');
  const documented = new Set([...readme.matchAll(/`((?:DB|ACCOUNT|MIRROR)_[A-Z0-9_]+)`/g)].map((m) => m[1]!));
  assert.ok(documented.size > 20, `found ${documented.size}`);
  const env = testEnv(tempDir());
  for (const name of documented) env[name] ??= ''; // empty is "unset": the defaults apply, nothing fails
  assert.deepEqual(loadConfig(env).warnings, []);
});

test('start says it in its banner and its log', async () => {
  const dir = tempDir();
  const p = await spawnProduct(testEnv(dir, { PORT: '0', ADMIN_PORT: '0', LOG_LEVEL: 'warn', DB_QUERY_TIMEOUT: '100' }));
  try {
    assert.match(p.stderr(), /warning: DB_QUERY_TIMEOUT is not a scopebase setting and does nothing; did you mean DB_QUERY_TIMEOUT_MS\?/);
    assert.match(p.stdout(), /"level":40.*DB_QUERY_TIMEOUT is not a scopebase setting/);
  } finally {
    p.killAll();
  }
});

test('SPEC 9.1: a malformed APPS, TRUSTED_PROXIES, NODE_ENV, ACCOUNT_SESSION_TTL, DB_MIRRORS, LOG_LEVEL, LOG_FORMAT, HOST or ADMIN_PORT stops the start with exit 78, naming the variable', () => {
  const secret = 'whsec_' + Buffer.alloc(24, 7).toString('base64');
  const cases: [string, string, RegExp, Record<string, string>?][] = [
    // A misspelt requireSession would otherwise leave the app open to anonymous visitors.
    ['APPS', JSON.stringify({ 'acme/web': { url: 'http://127.0.0.1:9', requireSesion: true } }), /APPS: value of acme\/web: unknown field "requireSesion"/],
    ['APPS', JSON.stringify({ '-acme/web': 'http://127.0.0.1:9' }), /APPS: key "-acme\/web" must be "org\/repo"/],
    ['APPS', JSON.stringify({ 'acme/.web': 'http://127.0.0.1:9' }), /APPS: key "acme\/.web" must be "org\/repo"/],
    ['APPS', JSON.stringify({ [`acme/${'a'.repeat(101)}`]: 'http://127.0.0.1:9' }), /APPS: key .* must be "org\/repo"/],
    // Before: both started, and every request went to the app without the query, or without the credentials.
    ['APPS', JSON.stringify({ 'acme/web': 'http://127.0.0.1:9/base?token=abc' }), /APPS: the URL of acme\/web must not have a query or a fragment \("\?token=abc"\)/],
    ['APPS', JSON.stringify({ 'acme/web': { url: 'http://user:pw@127.0.0.1:9/', requireSession: true } }), /APPS: the URL of acme\/web must not hold a user name or password/],
    // Before: both started, the last of each key taken in silence (every request to the second app; the app open).
    ['APPS', '{"acme/web": "http://127.0.0.1:9/a", "acme/w\\u0065b": "http://127.0.0.1:9/b"}', /APPS: key "acme\/web" is given twice \(JSON keeps only the last, in silence\): give each org\/repo once/],
    ['APPS', '{"acme/web": {"url": "http://127.0.0.1:9", "requireSession": true, "requireSession": false}}', /APPS: value of acme\/web: field "requireSession" is given twice/],
    ['DB_MIRRORS', `[{"name": "m", "url": "http://127.0.0.1:9/h", "secret": "${secret}", "url": "http://127.0.0.1:9/other"}]`, /DB_MIRRORS: entry 0: field "url" is given twice/],
    // Before: exit 1, "unexpected error: invalid IP address: 10.0.0.0/8", naming no variable.
    ['TRUSTED_PROXIES', '10.0.0.0/8/9', /TRUSTED_PROXIES: "10.0.0.0\/8\/9" is not an IP address or CIDR/],
    ['DB_MIRRORS', JSON.stringify([{ name: 'm', url: 'http://127.0.0.1:9/h', secret, timeoutMs: 5 }]), /DB_MIRRORS: entry 0: unknown field "timeoutMs"/],
    ['DB_MIRRORS', JSON.stringify([{ name: 'm', url: 'http://127.0.0.1:9/h', secret }, { name: 'n', url: 'ftp://x', secret }]), /DB_MIRRORS: entry 1: url: must be an http\(s\) URL/],
    // Before: LOG_LEVEL crashed with exit 1 and pino's words, LOG_FORMAT=xml was ignored, HOST crashed at listen.
    ['LOG_LEVEL', 'verbose', /LOG_LEVEL: must be one of silent, fatal, error, warn, info, debug, trace/],
    ['LOG_FORMAT', 'xml', /LOG_FORMAT: must be one of json, pretty/],
    ['HOST', '192.0.2.1', /HOST: "192.0.2.1" is not an address of this machine/],
    // Before: "PORT: port 18931 … is already in use (another scopebase or server is running there)".
    ['ADMIN_PORT', '18931', /ADMIN_PORT: must differ from PORT \(both are 18931\)/, { PORT: '18931' }],
    // Before: the same "PORT: … already in use", the product's own mirror listener having taken it.
    ['MIRROR_PORT', '18932', /MIRROR_PORT: must differ from PORT, ADMIN_PORT and DEV_IDP_PORT \(18932\)/, { PORT: '18932' }],
    ['SHUTDOWN_TIMEOUT_MS', '30s', /SHUTDOWN_TIMEOUT_MS: must be a whole number, got "30s"/],
    // Before: it started in development mode, the development sign-in (any email signs in) running.
    ['NODE_ENV', 'Production', /NODE_ENV: "Production" is not production mode: only "production", in lowercase, is/],
    // Before: it started, and every /verify and app request with a session answered 500 (an expiry past any date).
    ['ACCOUNT_SESSION_TTL', '999999999999d', /ACCOUNT_SESSION_TTL: must be at most 3650d \(ten years\), got "999999999999d"/],
  ];
  for (const [name, value, message, more] of cases) {
    const dir = tempDir();
    try {
      const r = spawnSync(process.execPath, ['src/cli/main.ts', 'start'], { env: { ...process.env, ...testEnv(dir, { [name]: value, ...more }) }, encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 78, `${value}: ${r.stderr}`);
      assert.match(r.stderr, message);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});
