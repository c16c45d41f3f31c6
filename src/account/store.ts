// The account store (node:sqlite under DATA_DIR): users, sessions by token hash, and pending sign-ins.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import type { SessionUser } from './contract.ts';
import { hashToken, newId, newToken } from './tokens.ts';

export interface Profile { name: string | null; email: string | null; login: string | null; avatarUrl: string | null }

export interface StoredSession { id: string; org: string; user: SessionUser; expiresAt: number; renewedAt: number }

/** What /login remembers until /callback: everything the provider must echo or prove. */
export interface PendingLogin {
  provider: string;
  org: string;
  repo: string;
  codeVerifier: string;
  nonce: string | null;
  returnTo: string;
  redirectUri: string;
  /** SHA-256 (hex) of the browser-binding cookie value. */
  binding: string;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS users (
  id TEXT PRIMARY KEY, provider TEXT NOT NULL, subject TEXT NOT NULL,
  name TEXT, email TEXT, login TEXT, avatar_url TEXT,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, UNIQUE (provider, subject)
);
CREATE TABLE IF NOT EXISTS sessions (
  token_hash BLOB PRIMARY KEY, id TEXT NOT NULL UNIQUE, org TEXT NOT NULL,
  user_id TEXT NOT NULL REFERENCES users(id), created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL, renewed_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_expires ON sessions (expires_at);
CREATE INDEX IF NOT EXISTS sessions_user ON sessions (user_id, created_at);
CREATE TABLE IF NOT EXISTS pending_logins (
  state_hash BLOB PRIMARY KEY, data TEXT NOT NULL, expires_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_expires ON pending_logins (expires_at);
CREATE INDEX IF NOT EXISTS pending_binding ON pending_logins (json_extract(data, '$.binding'));
`;

type Row = Record<string, string | number | null | Uint8Array>;

/** Expired pending sign-ins deleted per /login at the cap (~10 ms): all 100,000 at once blocked the event loop 7 s. */
const PENDING_PURGE_BATCH = 100;

/**
 * Live sessions one user may hold, in all orgs together; a new sign-in past it ends the user's oldest. Without it a
 * script signing one account in again and again kept every session for its 14 days: nothing else bounds the table.
 */
export const MAX_SESSIONS_PER_USER = 100;

/** Sessions kept in memory (by token hash): /verify runs on every request of a protected app. */
const RECENT_SESSIONS = 10_000;

export class AccountStore {
  private readonly db: DatabaseSync;
  private readonly q: Record<string, StatementSync>;
  /** Found sessions by token hash (hex). Our own writes update it; another connection's commit empties it. */
  private readonly recent = new Map<string, StoredSession>();
  private seenDataVersion = -1;
  /** Rows in pending_logins (expired ones until deleted); null: to be counted again (another connection wrote). */
  private pendingRows: number | null = null;

  constructor(dataDir: string, file = 'accounts.sqlite') {
    mkdirSync(dataDir, { recursive: true });
    this.db = new DatabaseSync(join(dataDir, file));
    this.db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;');
    this.db.exec(SCHEMA);
    this.q = {
      findUser: this.db.prepare('SELECT id FROM users WHERE provider = ? AND subject = ?'),
      hasUser: this.db.prepare('SELECT 1 FROM users WHERE id = ?'),
      insertUser: this.db.prepare('INSERT INTO users (id, provider, subject, name, email, login, avatar_url, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)'),
      updateUser: this.db.prepare('UPDATE users SET name = ?, email = ?, login = ?, avatar_url = ?, updated_at = ? WHERE id = ?'),
      insertSession: this.db.prepare('INSERT INTO sessions (token_hash, id, org, user_id, created_at, expires_at, renewed_at) VALUES (?, ?, ?, ?, ?, ?, ?)'),
      dataVersion: this.db.prepare('PRAGMA data_version'),
      findSession: this.db.prepare(`SELECT s.id, s.org, s.expires_at, s.renewed_at, u.id AS user_id, u.name, u.email, u.login, u.avatar_url
        FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = ? AND s.expires_at > ?`),
      renewSession: this.db.prepare('UPDATE sessions SET expires_at = ?, renewed_at = ? WHERE id = ?'),
      deleteSession: this.db.prepare('DELETE FROM sessions WHERE token_hash = ? AND org = ?'),
      insertPending: this.db.prepare('INSERT INTO pending_logins (state_hash, data, expires_at) VALUES (?, ?, ?)'),
      takePending: this.db.prepare('DELETE FROM pending_logins WHERE state_hash = ? RETURNING data, expires_at'),
      pendingBinding: this.db.prepare("SELECT 1 FROM pending_logins WHERE json_extract(data, '$.binding') = ? AND expires_at > ? LIMIT 1"),
      trimUserSessions: this.db.prepare(`DELETE FROM sessions WHERE token_hash IN (SELECT token_hash FROM sessions WHERE user_id = ?
        ORDER BY created_at DESC, rowid DESC LIMIT -1 OFFSET ?) RETURNING token_hash`),
      cleanSessions: this.db.prepare('DELETE FROM sessions WHERE rowid IN (SELECT rowid FROM sessions WHERE expires_at <= ? LIMIT ?)'),
      cleanPending: this.db.prepare('DELETE FROM pending_logins WHERE rowid IN (SELECT rowid FROM pending_logins WHERE expires_at <= ? LIMIT ?)'),
      countPending: this.db.prepare('SELECT count(*) AS n FROM pending_logins'),
      oldestPending: this.db.prepare('SELECT min(expires_at) AS t FROM pending_logins'),
    };
  }

  /** Creates or refreshes the user known to `provider` as `subject`; the id stays stable across sign-ins. */
  upsertUser(provider: string, subject: string, p: Profile, now = Date.now()): SessionUser {
    const found = this.q.findUser!.get(provider, subject) as Row | undefined;
    let id: string;
    if (found) {
      id = String(found.id);
      this.q.updateUser!.run(p.name, p.email, p.login, p.avatarUrl, now, id);
      this.recent.clear(); // cached sessions hold the old profile
    } else {
      id = newId('usr');
      this.q.insertUser!.run(id, provider, subject, p.name, p.email, p.login, p.avatarUrl, now, now);
    }
    return { id, ...p };
  }

  /** Whether a user with this id ever signed in (ids are made here, at a first sign-in). */
  hasUser(id: string): boolean {
    return this.q.hasUser!.get(id) !== undefined;
  }

  /** Returns the new session's token (for the cookie only: it is never stored or logged). */
  createSession(org: string, userId: string, ttlMs: number, now = Date.now()): { token: string; id: string; expiresAt: number } {
    const token = newToken();
    const id = newId('ses');
    this.q.insertSession!.run(hashToken(token), id, org, userId, now, now + ttlMs, now);
    for (const r of this.q.trimUserSessions!.all(userId, MAX_SESSIONS_PER_USER) as { token_hash: Uint8Array }[]) {
      this.recent.delete(Buffer.from(r.token_hash).toString('hex'));
    }
    return { token, id, expiresAt: now + ttlMs };
  }

  /** A live session by its token; the result is shared with the in-memory cache, so change it only via renewSession. */
  findSession(token: string, now = Date.now()): StoredSession | null {
    const hash = hashToken(token);
    const key = hash.toString('hex');
    this.forgetIfChangedElsewhere();
    let found = this.recent.get(key);
    if (!found) {
      const r = this.q.findSession!.get(hash, now) as Row | undefined;
      if (!r) return null;
      const s = (v: unknown) => (v === null ? null : String(v));
      found = {
        id: String(r.id), org: String(r.org), expiresAt: Number(r.expires_at), renewedAt: Number(r.renewed_at),
        user: { id: String(r.user_id), name: s(r.name), email: s(r.email), login: s(r.login), avatarUrl: s(r.avatar_url) },
      };
      if (this.recent.size >= RECENT_SESSIONS) this.recent.delete(this.recent.keys().next().value!);
      this.recent.set(key, found);
    }
    return found.expiresAt > now ? found : null;
  }

  renewSession(session: StoredSession, expiresAt: number, now = Date.now()): void {
    this.q.renewSession!.run(expiresAt, now, session.id);
    session.expiresAt = expiresAt;
    session.renewedAt = now;
  }

  /** Ends the session of this token only if it is `org`'s: a cookie sent to another org's host ends nothing there. */
  deleteSession(token: string, org: string): void {
    const hash = hashToken(token);
    if (Number(this.q.deleteSession!.run(hash, org).changes) > 0) this.recent.delete(hash.toString('hex'));
  }

  /** SQLite's data_version moves when another connection commits (a second process, an operator's sqlite3). */
  private forgetIfChangedElsewhere(): void {
    const version = Number((this.q.dataVersion!.get() as { data_version: number }).data_version);
    if (version !== this.seenDataVersion) {
      this.recent.clear();
      this.pendingRows = null;
      this.seenDataVersion = version;
    }
  }

  /**
   * Saves a pending sign-in unless `max` rows are held and none of them has expired (a batch of expired ones is deleted
   * first): then nothing is saved, and the answer is how long until the oldest expires (ms). Counted in memory, so a
   * flood costs no count(*).
   */
  savePending(state: string, login: PendingLogin, ttlMs: number, max: number, now = Date.now()): { fullForMs: number } | null {
    this.forgetIfChangedElsewhere();
    this.pendingRows ??= Number((this.q.countPending!.get() as { n: number }).n);
    if (this.pendingRows >= max) {
      this.pendingRows -= Number(this.q.cleanPending!.run(now, PENDING_PURGE_BATCH).changes);
      if (this.pendingRows >= max) return { fullForMs: Number((this.q.oldestPending!.get() as { t: number }).t) - now };
    }
    this.q.insertPending!.run(hashToken(state), JSON.stringify(login), now + ttlMs);
    this.pendingRows++;
    return null;
  }

  /** One use only: the row is deleted as it is read, so a replayed state finds nothing. */
  takePending(state: string, now = Date.now()): PendingLogin | null {
    const r = this.q.takePending!.get(hashToken(state)) as Row | undefined;
    if (r && this.pendingRows !== null) this.pendingRows--;
    if (!r || Number(r.expires_at) <= now) return null;
    return JSON.parse(String(r.data)) as PendingLogin;
  }

  /** Whether a live pending sign-in is bound to this binding-cookie hash (another tab's sign-in still in progress). */
  hasPendingBinding(binding: string, now = Date.now()): boolean {
    return this.q.pendingBinding!.get(binding, now) !== undefined;
  }

  /** Deletes at most `limit` expired sessions (the sweeper repeats it in slices until none is left). */
  deleteExpiredSessions(now: number, limit: number): number {
    return Number(this.q.cleanSessions!.run(now, limit).changes);
  }

  /** Deletes at most `limit` expired pending sign-ins. */
  deleteExpiredPending(now: number, limit: number): number {
    const n = Number(this.q.cleanPending!.run(now, limit).changes);
    if (this.pendingRows !== null) this.pendingRows -= n;
    return n;
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }
}
