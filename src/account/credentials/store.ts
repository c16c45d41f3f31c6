// The credential store: one node:sqlite file under DATA_DIR, values sealed (seal.ts), audit alongside (audit.ts).
import { chmodSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { ConfigError } from '../../shared/config.ts';
import { ApiError } from '../../shared/errors.ts';
import { AUDIT_SCHEMA, pruneAudit, recentAudit, writeAudit, type AuditAction, type AuditEntry } from './audit.ts';
import { Sealer, keyId, type Identity, type Sealed } from './seal.ts';

export const STORE_FILE = 'credentials.sqlite';
/** A value's serialized JSON may be at most this many bytes. */
export const MAX_VALUE_BYTES = 64 * 1024;
/** Credentials per (org, repo, user). */
export const MAX_CREDENTIALS_PER_USER = 100;
/**
 * Credentials per (org, user), every repo of the org together. Repos are any name (nothing registers them), so the
 * per-repo limit alone let one signed-in user store 100 × 64 KiB under every repo name they cared to type, until the
 * disk that every tenant's databases share was full. Per org, so that another org's runtimes, writing on a user's
 * behalf, cannot use up what the user may store in this one.
 */
export const MAX_CREDENTIALS_PER_USER_IN_ORG = 1000;
/** Credentials per user in all orgs (org labels are any name too): ten orgs' worth. */
export const MAX_CREDENTIALS_PER_USER_IN_ALL = 10_000;

export type CredentialValue = string | Record<string, unknown>;

export interface CredentialMeta {
  plugin: string;
  name: string;
  fields: string[];
  createdAt: string;
  updatedAt: string;
  expiresAt: string | null;
}

export interface Actor {
  /** A user id, or "runtime". */
  actor: string;
  requestId: string | null;
}

interface Row {
  rowid: number;
  org: string;
  repo: string;
  user_id: string;
  plugin: string;
  name: string;
  key_id: string;
  nonce: Uint8Array;
  ciphertext: Uint8Array;
  fields: string;
  created_at: string;
  updated_at: string;
  expires_at: string | null;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS credentials (
  org TEXT NOT NULL,
  repo TEXT NOT NULL,
  user_id TEXT NOT NULL,
  plugin TEXT NOT NULL,
  name TEXT NOT NULL,
  key_id TEXT NOT NULL,
  nonce BLOB NOT NULL,
  ciphertext BLOB NOT NULL,
  fields TEXT NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  expires_at TEXT,
  UNIQUE (org, repo, user_id, plugin, name)
);
CREATE INDEX IF NOT EXISTS credentials_user ON credentials (user_id, org);
${AUDIT_SCHEMA}`;

function identityOf(r: Row): Identity {
  return { org: r.org, repo: r.repo, user: r.user_id, plugin: r.plugin, name: r.name };
}

function metaOf(r: Row): CredentialMeta {
  return { plugin: r.plugin, name: r.name, fields: JSON.parse(r.fields) as string[], createdAt: r.created_at, updatedAt: r.updated_at, expiresAt: r.expires_at };
}

function sealedOf(r: Row): Sealed {
  return { keyId: r.key_id, nonce: Buffer.from(r.nonce), ciphertext: Buffer.from(r.ciphertext) };
}

/** Serializes a value for sealing; the caller has checked its shape. */
export function serializeValue(value: CredentialValue): Buffer {
  return Buffer.from(JSON.stringify(value), 'utf8');
}

export function fieldsOf(value: CredentialValue): string[] {
  return typeof value === 'string' ? [] : Object.keys(value);
}

export type ResealOutcome = 'resealed' | 'current' | 'gone';

export class CredentialStore {
  readonly path: string;
  readonly sealer: Sealer;
  private readonly db: DatabaseSync;

  private constructor(path: string, db: DatabaseSync, sealer: Sealer) {
    this.path = path;
    this.db = db;
    this.sealer = sealer;
  }

  /**
   * Opens (creating if needed) DATA_DIR/credentials.sqlite. Refuses with a ConfigError naming ACCOUNT_ENCRYPTION_KEYS
   * when stored records are sealed under a key that is not configured: starting anyway would make them unreadable.
   */
  static open(dataDir: string, keys: readonly Buffer[]): CredentialStore {
    mkdirSync(dataDir, { recursive: true });
    const path = join(dataDir, STORE_FILE);
    const db = new DatabaseSync(path);
    try {
      chmodSync(path, 0o600);
      db.exec('PRAGMA busy_timeout = 5000');
      db.exec('PRAGMA journal_mode = WAL');
      db.exec('PRAGMA synchronous = FULL');
      db.exec(SCHEMA);
      const sealer = new Sealer(keys);
      const stored = (db.prepare('SELECT key_id, count(*) AS n FROM credentials GROUP BY key_id').all() as { key_id: string; n: number }[]);
      const missing = stored.filter((r) => !sealer.has(r.key_id));
      if (missing.length > 0) {
        const list = missing.map((r) => `${r.key_id} (${r.n} record${r.n === 1 ? '' : 's'})`).join(', ');
        throw new ConfigError(`ACCOUNT_ENCRYPTION_KEYS: stored credentials are sealed under key id(s) ${list} that are not configured (configured: ${sealer.keyIds.join(', ')}). Add the old key back after the current one, start, and run \`scopebase rotate-keys\` before removing it.`);
      }
      return new CredentialStore(path, db, sealer);
    } catch (e) {
      db.close();
      throw e;
    }
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }

  private row(id: Identity): Row | undefined {
    return this.db.prepare('SELECT rowid, * FROM credentials WHERE org = ? AND repo = ? AND user_id = ? AND plugin = ? AND name = ?')
      .get(id.org, id.repo, id.user, id.plugin, id.name) as Row | undefined;
  }

  list(org: string, repo: string, user: string): CredentialMeta[] {
    const rows = this.db.prepare('SELECT rowid, * FROM credentials WHERE org = ? AND repo = ? AND user_id = ? ORDER BY plugin, name').all(org, repo, user) as unknown as Row[];
    return rows.map(metaOf);
  }

  meta(id: Identity): CredentialMeta | null {
    const r = this.row(id);
    return r ? metaOf(r) : null;
  }

  /** Opens a credential: null when absent; throws SealError when the stored record does not authenticate. */
  read(id: Identity, by: Actor): { meta: CredentialMeta; value: CredentialValue } | null {
    const r = this.row(id);
    if (!r) return null;
    const plain = this.sealer.open(id, sealedOf(r));
    const value = JSON.parse(plain.toString('utf8')) as CredentialValue;
    writeAudit(this.db, { ...id, action: 'read', ...by });
    return { meta: metaOf(r), value };
  }

  /** Creates or replaces; a fresh nonce every time. Throws quota_exceeded when a new one would pass the limit. */
  put(id: Identity, value: CredentialValue, expiresAt: string | null, by: Actor): { created: boolean; meta: CredentialMeta } {
    const sealed = this.sealer.seal(id, serializeValue(value));
    const fields = JSON.stringify(fieldsOf(value));
    const now = new Date().toISOString();
    return this.transaction(() => {
      const existing = this.row(id);
      if (!existing) {
        const { n } = this.db.prepare('SELECT count(*) AS n FROM credentials WHERE org = ? AND repo = ? AND user_id = ?').get(id.org, id.repo, id.user) as { n: number };
        if (n >= MAX_CREDENTIALS_PER_USER) {
          throw new ApiError('quota_exceeded', `a user may store at most ${MAX_CREDENTIALS_PER_USER} credentials per repo`, { limit: MAX_CREDENTIALS_PER_USER });
        }
        const { inOrg } = this.db.prepare('SELECT count(*) AS inOrg FROM credentials WHERE user_id = ? AND org = ?').get(id.user, id.org) as { inOrg: number };
        if (inOrg >= MAX_CREDENTIALS_PER_USER_IN_ORG) {
          throw new ApiError('quota_exceeded', `a user may store at most ${MAX_CREDENTIALS_PER_USER_IN_ORG} credentials in all repos of an org together; delete ones no longer used`, { limit: MAX_CREDENTIALS_PER_USER_IN_ORG });
        }
        const { total } = this.db.prepare('SELECT count(*) AS total FROM credentials WHERE user_id = ?').get(id.user) as { total: number };
        if (total >= MAX_CREDENTIALS_PER_USER_IN_ALL) {
          throw new ApiError('quota_exceeded', `a user may store at most ${MAX_CREDENTIALS_PER_USER_IN_ALL} credentials in all orgs together; delete ones no longer used`, { limit: MAX_CREDENTIALS_PER_USER_IN_ALL });
        }
        this.db.prepare(`INSERT INTO credentials (org, repo, user_id, plugin, name, key_id, nonce, ciphertext, fields, created_at, updated_at, expires_at)
          VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
          .run(id.org, id.repo, id.user, id.plugin, id.name, sealed.keyId, sealed.nonce, sealed.ciphertext, fields, now, now, expiresAt);
      } else {
        this.db.prepare('UPDATE credentials SET key_id = ?, nonce = ?, ciphertext = ?, fields = ?, updated_at = ?, expires_at = ? WHERE rowid = ?')
          .run(sealed.keyId, sealed.nonce, sealed.ciphertext, fields, now, expiresAt, existing.rowid);
      }
      const action: AuditAction = existing ? 'replace' : 'create';
      writeAudit(this.db, { ...id, action, ...by }, now);
      const meta = { plugin: id.plugin, name: id.name, fields: fieldsOf(value), createdAt: existing?.created_at ?? now, updatedAt: now, expiresAt };
      return { created: !existing, meta };
    });
  }

  delete(id: Identity, by: Actor): boolean {
    return this.transaction(() => {
      const res = this.db.prepare('DELETE FROM credentials WHERE org = ? AND repo = ? AND user_id = ? AND plugin = ? AND name = ?')
        .run(id.org, id.repo, id.user, id.plugin, id.name);
      if (res.changes === 0) return false;
      writeAudit(this.db, { ...id, action: 'delete', ...by });
      return true;
    });
  }

  /** Deletes at most `limit` audit rows past their retention, oldest first (the sweeper repeats it until none is left). */
  deleteExpiredAudit(now: number, limit: number): number {
    return pruneAudit(this.db, now, limit);
  }

  audit(org: string, repo: string, user: string, limit = 20): AuditEntry[] {
    return recentAudit(this.db, org, repo, user, limit);
  }

  // ---- rotation (scopebase rotate-keys) ----

  count(): { total: number; current: number } {
    const r = this.db.prepare('SELECT count(*) AS total, coalesce(sum(key_id = ?), 0) AS current FROM credentials').get(this.sealer.currentKeyId) as { total: number; current: number };
    return { total: r.total, current: r.current };
  }

  /** Row ids in order, for walking the table in small batches while the service keeps writing. */
  rowidsAfter(after: number, limit: number): number[] {
    return (this.db.prepare('SELECT rowid FROM credentials WHERE rowid > ? ORDER BY rowid LIMIT ?').all(after, limit) as { rowid: number }[]).map((r) => r.rowid);
  }

  /**
   * Re-seals one record under the current key. The write is a compare-and-swap on the old ciphertext, in its own
   * statement (its own short transaction): a concurrent replace or delete wins, and the record is looked at again.
   */
  reseal(rowid: number): ResealOutcome {
    for (let attempt = 0; attempt < 5; attempt++) {
      const r = this.db.prepare('SELECT rowid, * FROM credentials WHERE rowid = ?').get(rowid) as Row | undefined;
      if (!r) return 'gone';
      if (r.key_id === this.sealer.currentKeyId) return 'current';
      const id = identityOf(r);
      const sealed = this.sealer.seal(id, this.sealer.open(id, sealedOf(r)));
      const res = this.db.prepare('UPDATE credentials SET key_id = ?, nonce = ?, ciphertext = ? WHERE rowid = ? AND key_id = ? AND nonce = ? AND ciphertext = ?')
        .run(sealed.keyId, sealed.nonce, sealed.ciphertext, rowid, r.key_id, r.nonce, r.ciphertext);
      if (res.changes === 1) return 'resealed';
    }
    throw new Error(`record ${rowid} kept changing while it was being re-sealed; run rotate-keys again`);
  }

  private transaction<T>(fn: () => T): T {
    this.db.exec('BEGIN IMMEDIATE');
    try {
      const out = fn();
      this.db.exec('COMMIT');
      return out;
    } catch (e) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK'); // a full disk (SQLITE_FULL) has rolled it back already
      throw e;
    }
  }
}

export { keyId };
