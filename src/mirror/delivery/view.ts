// The main thread's view of delivery: each lane's saved state as the delivery thread last reported it, and the
// highest version hinted. It answers /_db/status, change-log retention (the floor) and the metrics synchronously.
import type { MirrorState, Scope } from '../../db/contract.ts';
import { scopeKey } from './lane.ts';
import type { LaneView } from './metrics.ts';
import type { DeliveryRow } from './store.ts';
import type { LaneReport } from './thread-protocol.ts';

interface LaneState {
  saved: number;
  known: number;
  lastError: string | null;
  failingSince: number | null;
}

interface DatabaseView {
  scope: Scope;
  /** Highest version hinted or reported for the database. */
  known: number;
  /** Per configured mirror, in configuration order. */
  lanes: Map<string, LaneState>;
}

export class DeliveryView {
  private readonly mirrors: string[];
  private readonly stallAfterMs: number;
  private readonly databases = new Map<string, DatabaseView>();

  constructor(mirrors: string[], stallAfterMs: number, saved: DeliveryRow[]) {
    this.mirrors = mirrors;
    this.stallAfterMs = stallAfterMs;
    for (const row of saved) {
      const lane = this.database(row).lanes.get(row.mirror);
      if (!lane) continue; // a mirror no longer configured
      lane.saved = lane.known = row.deliveredVersion;
      lane.lastError = row.lastError;
      lane.failingSince = row.failingSince;
    }
  }

  /** The database has reached `version` (a commit, a status read). */
  noteVersion(scope: Scope, version: number): void {
    const db = this.database(scope);
    if (version > db.known) db.known = version;
  }

  apply(report: LaneReport): void {
    const key = scopeKey(report);
    if (report.dropped) {
      this.databases.delete(key);
      return;
    }
    const lane = this.database(report).lanes.get(report.mirror);
    if (!lane) return;
    lane.saved = Math.max(lane.saved, report.saved);
    lane.known = report.known;
    lane.lastError = report.lastError;
    lane.failingSince = report.failingSince;
  }

  /** The lowest saved version over all mirrors (0 for one that never acknowledged): events above it are kept. */
  floor(scope: Scope): number | null {
    if (this.mirrors.length === 0) return null;
    const db = this.databases.get(scopeKey(scope));
    if (!db) return 0;
    let floor = Infinity;
    for (const lane of db.lanes.values()) floor = Math.min(floor, lane.saved);
    return floor;
  }

  /** Per mirror with something saved for the database: the saved version (what a cluster's follower is told). */
  cursors(scope: Scope): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, lane] of this.databases.get(scopeKey(scope))?.lanes ?? []) if (lane.saved > 0) out[name] = lane.saved;
    return out;
  }

  hasMirror(name: string): boolean {
    return this.mirrors.includes(name);
  }

  states(scope: Scope, currentVersion: number): MirrorState[] {
    const db = this.databases.get(scopeKey(scope));
    const now = Date.now();
    return this.mirrors.map((name) => {
      const lane = db?.lanes.get(name);
      const delivered = lane?.saved ?? 0;
      return {
        name, deliveredVersion: delivered, pendingEvents: Math.max(0, currentVersion - delivered),
        lastError: lane?.lastError ?? null, stalled: lane ? this.stalled(lane, now) : false,
      };
    });
  }

  *lanes(): Iterable<LaneView> {
    const now = Date.now();
    for (const db of this.databases.values()) {
      for (const [mirror, lane] of db.lanes) {
        const known = Math.max(db.known, lane.known);
        yield { mirror, ...db.scope, delivered: lane.saved, pending: Math.max(0, known - lane.saved), stalled: this.stalled(lane, now) };
      }
    }
  }

  private stalled(lane: LaneState, now: number): boolean {
    return lane.failingSince !== null && now - lane.failingSince >= this.stallAfterMs;
  }

  private database(scope: Scope): DatabaseView {
    const key = scopeKey(scope);
    let db = this.databases.get(key);
    if (!db) {
      const lanes = new Map(this.mirrors.map((m) => [m, { saved: 0, known: 0, lastError: null, failingSince: null } as LaneState]));
      this.databases.set(key, (db = { scope: { org: scope.org, repo: scope.repo, database: scope.database }, known: 0, lanes }));
    }
    return db;
  }
}
