// Rows that every sign-in or credential call adds are deleted as fast as they come, in slices that keep requests
// answered, and each table has a bound: expired sessions went at 500 per 10 minutes (a busy org's backlog grew for
// good), a user's live sessions had no bound, audit rows were pruned by age only when the service started, and a user's
// audit rows had no bound across orgs.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Browser, signIn, startAccounts, type AccountsProduct } from './helpers/accounts.ts';
import { hashToken, newToken } from '../src/account/tokens.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { AUDIT_MAX_PER_USER, AUDIT_RETENTION_MS } from '../src/account/credentials/audit.ts';

// The bounds docs/accounts.md and docs/credentials.md state.
const MAX_SESSIONS_PER_USER = 100;
const AUDIT_MAX_PER_USER_IN_ALL = 100_000;

const SWEEP_MS = 300;
let p: AccountsProduct;
let accounts: DatabaseSync; // other connections on the stores, as an operator's sqlite3 would be
let credentials: DatabaseSync;
let cookie: string;
let userId: string;

before(async () => {
  p = await startAccounts({ ACCOUNT_LOGIN_RATE_BURST: '10000', ACCOUNT_LOGIN_RATE_PER_MINUTE: '10000' }, { cleanupEveryMs: SWEEP_MS });
  const { browser } = await signIn(p);
  cookie = `session=${browser.cookies(`acme.localhost:${p.port}`).get('session')}`;
  accounts = new DatabaseSync(join(p.config.dataDir, 'accounts.sqlite'));
  accounts.exec('PRAGMA busy_timeout = 5000');
  credentials = new DatabaseSync(join(p.config.dataDir, 'credentials.sqlite'));
  credentials.exec('PRAGMA busy_timeout = 5000');
  userId = String((accounts.prepare('SELECT id FROM users').get() as { id: string }).id);
});
after(async () => {
  accounts.close();
  credentials.close();
  await p.close();
});

const count = (db: DatabaseSync, sql: string, ...args: (string | number)[]) => Number((db.prepare(sql).get(...args) as { n: number }).n);

function insertMany(db: DatabaseSync, sql: string, rows: number, args: (i: number) => (string | number | Uint8Array | null)[]): void {
  const ins = db.prepare(sql);
  db.exec('BEGIN');
  for (let i = 0; i < rows; i++) ins.run(...args(i));
  db.exec('COMMIT');
}

test('a backlog of 100,000 expired sessions is gone by the next sweep, and requests are answered meanwhile', async () => {
  const now = Date.now();
  insertMany(accounts, 'INSERT INTO sessions (token_hash, id, org, user_id, created_at, expires_at, renewed_at) VALUES (?, ?, ?, ?, ?, ?, ?)', 100_000,
    (i) => [hashToken(newToken()), `ses_old${i}`, 'acme', userId, now - 1e9, now - 1000 - i, now - 1e9]);
  insertMany(accounts, 'INSERT INTO pending_logins (state_hash, data, expires_at) VALUES (?, ?, ?)', 5000, (i) => [hashToken(newToken()), '{}', now - 1000 - i]);
  const expired = () => count(accounts, 'SELECT (SELECT count(*) FROM (SELECT 1 FROM sessions WHERE expires_at <= ?1 LIMIT 1)) + (SELECT count(*) FROM (SELECT 1 FROM pending_logins WHERE expires_at <= ?1 LIMIT 1)) AS n', now);
  let answered = 0; // while expired rows were left: the sweep let requests in between its slices
  const deadline = Date.now() + 20_000;
  while (expired() > 0 && Date.now() < deadline) {
    const v = await p.call('/web/_account/verify', { headers: { cookie } });
    assert.equal(v.status, 200, 'the live session is untouched');
    if (expired() > 0) answered++;
  }
  assert.equal(expired(), 0, 'every expired row is deleted by the sweeps, not 500 per sweep');
  // All at once the delete holds the event loop (~0.5 s) and no request is answered while rows are left; in ~10-ms
  // slices many are. Counted, not timed: a timed bound failed at load 5 on a shared machine.
  assert.ok(answered >= 5, `only ${answered} requests were answered while the sweep ran`);
});

test('a user holds at most 100 live sessions: a new sign-in ends the oldest', async () => {
  const now = Date.now();
  const tokens = Array.from({ length: MAX_SESSIONS_PER_USER }, () => newToken());
  insertMany(accounts, 'INSERT INTO sessions (token_hash, id, org, user_id, created_at, expires_at, renewed_at) VALUES (?, ?, ?, ?, ?, ?, ?)', tokens.length,
    (i) => [hashToken(tokens[i]!), `ses_cap${i}`, i % 2 ? 'acme' : 'globex', userId, now - 1e6 + i, now + 1e9, now]);
  const verify = (token: string, i: number) => p.call('/web/_account/verify', { org: i % 2 ? 'acme' : 'globex', headers: { cookie: `session=${token}` } });
  assert.equal((await verify(tokens[0]!, 0)).status, 200, 'the oldest is valid before');
  const { browser } = await signIn(p, { browser: new Browser() });
  assert.ok(browser.cookies(`acme.localhost:${p.port}`).get('session'));
  assert.equal(count(accounts, 'SELECT count(*) AS n FROM sessions WHERE user_id = ? AND expires_at > ?', userId, Date.now()), MAX_SESSIONS_PER_USER);
  assert.equal((await verify(tokens[0]!, 0)).status, 401, 'the oldest ended (it was cached in memory too)');
  assert.equal((await verify(tokens[3]!, 3)).status, 200, 'the newer ones stay');
});

test('audit rows past their retention are deleted while the service runs, not only at start', async () => {
  const old = new Date(Date.now() - AUDIT_RETENTION_MS - 86_400_000).toISOString();
  insertMany(credentials, 'INSERT INTO credential_audit (at, org, repo, user_id, plugin, name, action, actor, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)', 20_000,
    (i) => [old, 'acme', 'web', `usr_gone${i % 50}`, 'gh', 'token', 'read', 'runtime', null]);
  insertMany(credentials, 'INSERT INTO credential_audit (at, org, repo, user_id, plugin, name, action, actor, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)', 10,
    () => [new Date().toISOString(), 'acme', 'web', 'usr_recent', 'gh', 'token', 'read', 'runtime', null]);
  const deadline = Date.now() + 10_000;
  while (count(credentials, 'SELECT count(*) AS n FROM credential_audit WHERE at <= ?', old) > 0 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.equal(count(credentials, 'SELECT count(*) AS n FROM credential_audit WHERE at <= ?', old), 0);
  assert.equal(count(credentials, "SELECT count(*) AS n FROM credential_audit WHERE user_id = 'usr_recent'"), 10);
});

test("a user's audit rows in all orgs together stay within 100,000, taken from the fullest org", async () => {
  const put = (org: string) => p.call(`/web/_account/credentials/gh/token?user=${userId}`, {
    org, method: 'PUT', body: { value: 'v' }, headers: { authorization: `Bearer ${repoSecret(p.config.rootKeys[0]!, org, 'web')}` },
  });
  assert.equal((await put('acme')).status, 201);
  const at = new Date().toISOString();
  // Eleven orgs of AUDIT_MAX_PER_USER rows each (the most the per-org trim leaves; the last a few more), then acme's.
  const orgs = Array.from({ length: AUDIT_MAX_PER_USER_IN_ALL / AUDIT_MAX_PER_USER + 1 }, (_, i) => `org${i}`);
  insertMany(credentials, 'INSERT INTO credential_audit (at, org, repo, user_id, plugin, name, action, actor, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)', orgs.length * AUDIT_MAX_PER_USER + 20,
    (i) => [at, orgs[Math.min(orgs.length - 1, Math.floor(i / AUDIT_MAX_PER_USER))] ?? 'org0', 'web', userId, 'gh', 'token', 'read', 'runtime', null]);
  insertMany(credentials, 'INSERT INTO credential_audit (at, org, repo, user_id, plugin, name, action, actor, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)', 1, () => [at, 'acme', 'web', userId, 'gh', 'token', 'read', 'runtime', null]);
  // The trim runs on every 32nd row: make the next write such a row.
  const next = count(credentials, 'SELECT max(id) + 1 AS n FROM credential_audit');
  const pad = (32 - (next % 32)) % 32;
  insertMany(credentials, 'INSERT INTO credential_audit (at, org, repo, user_id, plugin, name, action, actor, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)', pad, () => [at, 'acme', 'web', 'usr_other', 'gh', 'token', 'read', 'runtime', null]);
  const acmeBefore = count(credentials, "SELECT count(*) AS n FROM credential_audit WHERE user_id = ? AND org = 'acme'", userId);
  assert.ok(count(credentials, 'SELECT count(*) AS n FROM credential_audit WHERE user_id = ?', userId) > AUDIT_MAX_PER_USER_IN_ALL);

  assert.equal((await put('acme')).status, 200, 'a replace writes one audit row');
  assert.equal(count(credentials, 'SELECT count(*) AS n FROM credential_audit WHERE user_id = ?', userId), AUDIT_MAX_PER_USER_IN_ALL);
  assert.equal(count(credentials, "SELECT count(*) AS n FROM credential_audit WHERE user_id = ? AND org = 'acme'", userId), acmeBefore + 1, "acme's rows stay");
  assert.ok(count(credentials, "SELECT count(*) AS n FROM credential_audit WHERE user_id = ? AND org = 'org10'", userId) < AUDIT_MAX_PER_USER, 'the fullest org gave up its oldest');
});
