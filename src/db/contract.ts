// What the proxy needs from the database control service, whether it runs in-process or as its own process.
import type { Readable } from 'node:stream';

export interface DbRequest {
  op: string;
  org: string;
  repo: string;
  authorization: string | undefined;
  /**
   * True when the route that made this request (in this process) already found `authorization` to be the repo's
   * secret, before reading the body (admit.ts): the service does not check it twice. Never read from the wire.
   */
  authenticated?: boolean;
  body: Buffer;
  requestId: string;
  /** /_db/import (SPEC 4.12): the body as it arrives, with the query string and content type. */
  upload?: { stream: Readable; query: string; contentType: string | undefined };
}

/** On an export (SPEC 4.12): the id of the last migration applied at the exported version, which the clean copy does not hold. */
export const LAST_MIGRATION_HEADER = 'x-db-last-migration';

export interface DbResponse {
  status: number;
  headers?: Record<string, string>;
  /** A JSON text, or a stream for snapshots. */
  body: string | Buffer | Readable;
}

export interface DbHandler {
  handle(req: DbRequest): Promise<DbResponse>;
}

/** One database: (org, repo, database). Names are already checked (SPEC 2). */
export interface Scope {
  org: string;
  repo: string;
  database: string;
}

/** A SPEC 5 notification, exactly as stored in the database's change log and sent to mirrors. */
export interface ChangeEvent {
  id: string;
  type: 'database.changed' | 'database.migrated' | 'database.restored' | 'database.imported';
  org: string;
  repo: string;
  database: string;
  version: number;
  previousVersion: number;
  operation: 'execute' | 'migrate' | 'restore' | 'import';
  committedAt: string;
  changes: { rowsAffected: number; tables: string[] };
  changeset: string | null;
  migrations?: { id: string; sql: string }[];
  /** A restore's target version (SPEC 4.11). */
  restoredVersion?: number;
}

export interface MirrorState {
  name: string;
  deliveredVersion: number;
  pendingEvents: number;
  lastError: string | null;
  stalled?: boolean;
}

/**
 * What consumers of the change log (mirror delivery) read. The change log itself is written by the
 * database in the write's own transaction; this is only how it is read back.
 */
export interface ChangeFeed {
  /** Called after every commit that changed a database: a hint, not durable (the change log is). */
  onCommit(listener: (scope: Scope, version: number) => void): void;
  /** Events with version > since, oldest first, at most `limit`; `version` is the database's current one. Throws ApiError('gone') past retention, 'database_not_found' if missing. */
  readChanges(scope: Scope, since: number, limit: number): Promise<{ events: ChangeEvent[]; version: number }>;
  /** Current version, or null when the database does not exist. */
  currentVersion(scope: Scope): Promise<number | null>;
  /** Every database on disk, for recovery after a restart. */
  listDatabases(): AsyncIterable<Scope>;
}

/** What the mirror side tells the database service (attached at wiring time; db never imports mirror). */
export interface MirrorReport {
  /** Per-mirror delivery state of one database, for /_db/status. */
  states(scope: Scope, currentVersion: number): MirrorState[];
  /** The lowest version every mirror has acknowledged (events above it are kept), or null with no mirrors. */
  acknowledgedFloor(scope: Scope): number | null;
}

/**
 * What a cluster (src/cluster) tells the database service, attached at wiring time: db never imports cluster.
 * Without one the service is the single node it always was.
 */
export interface Replication {
  /**
   * Before a request touches a database: throws a 503 ApiError when this node does not (or no longer may) serve it,
   * a 404 for a write that cannot create a database (`creates` false: a restore) naming one placed nowhere, and may
   * refuse a new database with 429 or 507 before claiming it. A write admitted (it did not throw) is matched by one
   * `settled` once it is over, whatever its outcome.
   */
  admit(scope: Scope, write: boolean, creates?: boolean): Promise<void>;
  /** A write admitted is over (answered, failed, or its interactive transaction ended): a first write that made nothing gives back the database's placement once idle. */
  settled(scope: Scope): Promise<void>;
  /** After a write committed `version`: resolves once the follower holds it durably; throws a 503 ApiError otherwise. */
  replicated(scope: Scope, version: number): Promise<void>;
  /** A version committed with no caller to wait for it (a background re-probe found it): shipped, and shipped again after a failure, as async durability's are. */
  replicatedLater(scope: Scope, version: number): void;
  /** The repo's databases wherever the cluster placed them, sorted: what `status` lists (a node's files are only its own). */
  databases(org: string, repo: string): string[];
}

/**
 * What a cluster node tells mirror delivery (implemented in src/mirror, driven by src/cluster, joined by
 * src/cli/start.ts; neither imports the other): only a primary within its lease delivers, and only events its
 * follower already holds.
 */
export interface MirrorGate {
  /** This node is the database's primary and its follower holds `upTo`: events up to it may leave. */
  grant(scope: Scope, upTo: number): void;
  revoke(scope: Scope): void;
  /** The node's lease was lost: no grant holds any more. */
  revokeAll(): void;
  /** The node may act as a primary until `at` (ms on gate.ts's sharedNow clock). */
  leaseUntil(at: number): void;
  /** What each mirror acknowledged of the database, as saved here: shipped to the follower. */
  cursors(scope: Scope): Record<string, number>;
  /** Cursors a primary shipped: this node resumes from them if it takes over. */
  seed(scope: Scope, cursors: Record<string, number>): void;
}
