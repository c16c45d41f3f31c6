// Durable delivery state in DATA_DIR/mirrors.sqlite: what each mirror acknowledged, per database, across restarts.
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import type { Scope } from '../../db/contract.ts';

export interface DeliveryRow {
  mirror: string;
  org: string;
  repo: string;
  database: string;
  deliveredVersion: number;
  lastError: string | null;
  lastSuccessAt: number | null;
  failingSince: number | null;
}

export class DeliveryStore {
  private readonly db: DatabaseSync;
  private readonly upsertSuccess: StatementSync;
  private readonly upsertFailure: StatementSync;

  constructor(path: string) {
    mkdirSync(dirname(path), { recursive: true });
    this.db = new DatabaseSync(path);
    // NORMAL in WAL survives a process crash; a lost ack after a power cut only means a re-delivery (at least once).
    this.db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;
      CREATE TABLE IF NOT EXISTS delivery (
        mirror TEXT NOT NULL, org TEXT NOT NULL, repo TEXT NOT NULL, database TEXT NOT NULL,
        delivered_version INTEGER NOT NULL DEFAULT 0,
        last_error TEXT, last_success_at INTEGER, failing_since INTEGER,
        PRIMARY KEY (mirror, org, repo, database)
      ) WITHOUT ROWID;`);
    this.upsertSuccess = this.db.prepare(`INSERT INTO delivery (mirror, org, repo, database, delivered_version, last_error, last_success_at, failing_since)
      VALUES (?, ?, ?, ?, ?, NULL, ?, NULL)
      ON CONFLICT DO UPDATE SET delivered_version = max(delivered_version, excluded.delivered_version), last_error = NULL,
        last_success_at = excluded.last_success_at, failing_since = NULL`);
    this.upsertFailure = this.db.prepare(`INSERT INTO delivery (mirror, org, repo, database, delivered_version, last_error, failing_since)
      VALUES (?, ?, ?, ?, ?, ?, ?)
      ON CONFLICT DO UPDATE SET last_error = excluded.last_error, failing_since = coalesce(failing_since, excluded.failing_since)`);
  }

  all(): DeliveryRow[] {
    return this.db.prepare('SELECT * FROM delivery').all().map((r) => ({
      mirror: r.mirror as string, org: r.org as string, repo: r.repo as string, database: r.database as string,
      deliveredVersion: Number(r.delivered_version), lastError: (r.last_error as string | null) ?? null,
      lastSuccessAt: r.last_success_at === null ? null : Number(r.last_success_at),
      failingSince: r.failing_since === null ? null : Number(r.failing_since),
    }));
  }

  recordSuccess(mirror: string, scope: Scope, version: number, at: number): void {
    this.upsertSuccess.run(mirror, scope.org, scope.repo, scope.database, version, at);
  }

  /** `delivered` only seeds a new row; an existing row keeps its acknowledged version. */
  recordFailure(mirror: string, scope: Scope, delivered: number, error: string, since: number): void {
    this.upsertFailure.run(mirror, scope.org, scope.repo, scope.database, delivered, error, since);
  }

  /** Events past retention were skipped: move the acknowledged version forward without calling it a success. */
  skipTo(mirror: string, scope: Scope, version: number, error: string): void {
    this.db.prepare(`INSERT INTO delivery (mirror, org, repo, database, delivered_version, last_error) VALUES (?, ?, ?, ?, ?, ?)
      ON CONFLICT DO UPDATE SET delivered_version = max(delivered_version, excluded.delivered_version), last_error = excluded.last_error`)
      .run(mirror, scope.org, scope.repo, scope.database, version, error);
  }

  /** A cursor another cluster node reported: the acknowledged version only moves up, the row's other columns stay. */
  raise(mirror: string, scope: Scope, version: number): void {
    this.db.prepare(`INSERT INTO delivery (mirror, org, repo, database, delivered_version) VALUES (?, ?, ?, ?, ?)
      ON CONFLICT DO UPDATE SET delivered_version = max(delivered_version, excluded.delivered_version)`)
      .run(mirror, scope.org, scope.repo, scope.database, version);
  }

  /** A database that no longer exists: nothing left to deliver. */
  forget(mirror: string, scope: Scope): void {
    this.db.prepare('DELETE FROM delivery WHERE mirror = ? AND org = ? AND repo = ? AND database = ?').run(mirror, scope.org, scope.repo, scope.database);
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }
}

/**
 * A whole-instance restore's part (`scopebase restore`, on the restored copy before a server opens it): no mirror has
 * acknowledged past the version a restored database held, so its restore event (src/db/backup-restored.ts) is sent
 * to every mirror; rows of a database the backup does not hold go. The copy of this file may be newer than a
 * database's copy (a backup takes them one after another), and its versions above are another history's.
 */
export function rewindDelivery(path: string, held: (scope: Scope) => number | undefined): void {
  const db = new DatabaseSync(path);
  try {
    db.exec('PRAGMA synchronous = OFF; BEGIN IMMEDIATE'); // the restore syncs the file itself
    const rows = db.prepare('SELECT mirror, org, repo, database, delivered_version AS v FROM delivery').all() as { mirror: string; org: string; repo: string; database: string; v: number }[];
    const lower = db.prepare('UPDATE delivery SET delivered_version = ? WHERE mirror = ? AND org = ? AND repo = ? AND database = ?');
    const drop = db.prepare('DELETE FROM delivery WHERE mirror = ? AND org = ? AND repo = ? AND database = ?');
    for (const r of rows) {
      const version = held({ org: r.org, repo: r.repo, database: r.database });
      if (version === undefined) drop.run(r.mirror, r.org, r.repo, r.database);
      else if (Number(r.v) > version) lower.run(version, r.mirror, r.org, r.repo, r.database);
    }
    db.exec('COMMIT');
  } finally {
    if (db.isTransaction) db.exec('ROLLBACK');
    db.close();
  }
}
