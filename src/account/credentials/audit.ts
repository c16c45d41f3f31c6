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

/** Audit rows older than this are pruned when the store opens. */
export const AUDIT_RETENTION_MS = 180 * 24 * 3600 * 1000;
/**
 * Audit rows kept per (org, user), every repo of the org together: the oldest go as new ones come. Without it a
 * signed-in user grew the store without bound by creating and deleting a credential under ever new repo names (each a
 * row). Per org, so that another org's runtimes cannot push a user's entries here out.
 */
export const AUDIT_MAX_PER_USER = 10_000;
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
  if (Number(lastInsertRowid) % TRIM_EVERY === 0) trimAudit(db, r.org, r.user);
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

export function pruneAudit(db: DatabaseSync, now = Date.now()): void {
  db.prepare('DELETE FROM credential_audit WHERE at < ?').run(new Date(now - AUDIT_RETENTION_MS).toISOString());
}
