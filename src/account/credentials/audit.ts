// Who read, created, replaced or deleted which credential, and when. Never values.
import type { DatabaseSync } from 'node:sqlite';

export type AuditAction = 'read' | 'create' | 'replace' | 'delete';

export interface AuditEntry {
  at: string;
  plugin: string;
  name: string;
  action: AuditAction;
  /** The user's id when they acted with their session, or "runtime" for the repo's secret. */
  actor: string;
  requestId: string | null;
}

/** Audit rows older than this are deleted (at start and every 10 minutes, oldest first, in slices). */
export const AUDIT_RETENTION_MS = 180 * 24 * 3600 * 1000;
/**
 * Audit rows kept per (org, user), every repo of the org together: the oldest go as new ones come. Without it a
 * signed-in user grew the store without bound by creating and deleting a credential under ever new repo names (each a
 * row). Per org, so that another org's runtimes cannot push a user's entries here out.
 */
export const AUDIT_MAX_PER_USER = 10_000;
/**
 * Audit rows kept per user in all orgs together (org labels are any name: ten orgs' worth, as for credentials). Past
 * it the user's org with the most rows loses its oldest, so one org's runtime flooding cannot empty another org's.
 */
export const AUDIT_MAX_PER_USER_IN_ALL = 10 * AUDIT_MAX_PER_USER;
/** The per-user trim runs on every this-many-th row (a walk of AUDIT_MAX_PER_USER index entries), so the bound is soft by this much. */
const TRIM_EVERY = 32;

export const AUDIT_SCHEMA = `
CREATE TABLE IF NOT EXISTS credential_audit (
  id INTEGER PRIMARY KEY,
  at TEXT NOT NULL,
  org TEXT NOT NULL,
  repo TEXT NOT NULL,
  user_id TEXT NOT NULL,
  plugin TEXT NOT NULL,
  name TEXT NOT NULL,
  action TEXT NOT NULL,
  actor TEXT NOT NULL,
  request_id TEXT
);
CREATE INDEX IF NOT EXISTS credential_audit_scope ON credential_audit (org, repo, user_id, id);
CREATE INDEX IF NOT EXISTS credential_audit_user ON credential_audit (org, user_id, id);
CREATE INDEX IF NOT EXISTS credential_audit_by_user ON credential_audit (user_id, org);
`;

export interface AuditRecord {
  org: string;
  repo: string;
  user: string;
  plugin: string;
  name: string;
  action: AuditAction;
  actor: string;
  requestId: string | null;
}

export function writeAudit(db: DatabaseSync, r: AuditRecord, at = new Date().toISOString()): void {
  const { lastInsertRowid } = db.prepare('INSERT INTO credential_audit (at, org, repo, user_id, plugin, name, action, actor, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)')
    .run(at, r.org, r.repo, r.user, r.plugin, r.name, r.action, r.actor, r.requestId);
  if (Number(lastInsertRowid) % TRIM_EVERY === 0) {
    trimAudit(db, r.org, r.user);
    trimUserAudit(db, r.user);
  }
}

/** Keeps the user's rows in all orgs to `max`, taking the excess from the orgs where the user has the most. */
export function trimUserAudit(db: DatabaseSync, user: string, max = AUDIT_MAX_PER_USER_IN_ALL): void {
  let { n } = db.prepare('SELECT count(*) AS n FROM credential_audit WHERE user_id = ?').get(user) as { n: number };
  while (n > max) {
    const top = db.prepare('SELECT org, count(*) AS n FROM credential_audit WHERE user_id = ? GROUP BY org ORDER BY n DESC LIMIT 1').get(user) as { org: string; n: number };
    const keep = Math.max(0, top.n - (n - max));
    trimAudit(db, top.org, user, keep);
    n -= top.n - keep;
  }
}

/** Keeps the user's AUDIT_MAX_PER_USER most recent rows in `org`. */
export function trimAudit(db: DatabaseSync, org: string, user: string, keep = AUDIT_MAX_PER_USER): void {
  db.prepare(`DELETE FROM credential_audit WHERE org = ? AND user_id = ? AND id <= (
    SELECT id FROM credential_audit WHERE org = ? AND user_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)`).run(org, user, org, user, keep);
}

export function recentAudit(db: DatabaseSync, org: string, repo: string, user: string, limit = 20): AuditEntry[] {
  const rows = db.prepare('SELECT at, plugin, name, action, actor, request_id FROM credential_audit WHERE org = ? AND repo = ? AND user_id = ? ORDER BY id DESC LIMIT ?')
    .all(org, repo, user, limit) as { at: string; plugin: string; name: string; action: AuditAction; actor: string; request_id: string | null }[];
  return rows.map((r) => ({ at: r.at, plugin: r.plugin, name: r.name, action: r.action, actor: r.actor, requestId: r.request_id }));
}

/**
 * Deletes rows past AUDIT_RETENTION_MS among the `limit` oldest (ids grow with time, so this reads `limit` rows, never
 * the table) and says how many: fewer than `limit` means none older is left.
 */
export function pruneAudit(db: DatabaseSync, now: number, limit: number): number {
  return Number(db.prepare(`DELETE FROM credential_audit WHERE id IN (SELECT id FROM (SELECT id, at FROM credential_audit ORDER BY id LIMIT ?) WHERE at < ?)`)
    .run(limit, new Date(now - AUDIT_RETENTION_MS).toISOString()).changes);
}
