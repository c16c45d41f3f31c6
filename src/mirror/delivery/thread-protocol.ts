// What the main thread and the delivery thread say to each other (structured-clone messages over the worker port).
import type { MirrorConfig } from '../../shared/config.ts';
import type { ErrorCode } from '../../shared/errors.ts';
import type { FailureKind } from './sender.ts';

export interface ThreadSettings {
  mirrors: MirrorConfig[];
  dataDir: string;
  timeoutMs: number;
  maxBackoffMs: number;
  stallAfterMs: number;
  concurrency: number;
  baseBackoffMs?: number;
  /** The main logger's level as a pino number: the thread sends only what would be written. */
  logLevel: number;
  /** A cluster node: nothing is sent until the node grants it (gate.ts). */
  gated: boolean;
}

/** [org, repo, database, version]: the database's change log may hold events up to `version`. */
export type Hint = [org: string, repo: string, database: string, version: number];

/** [mirror, org, repo, database, version]: a cursor another node reported the mirror to have acknowledged. */
export type Cursor = [mirror: string, org: string, repo: string, database: string, version: number];

/** A cluster node's delivery rights (gate.ts); `grants` are [org, repo, database, up to version]. */
export interface GateChange {
  grants: Hint[];
  revoked: [org: string, repo: string, database: string][];
  revokeAll: boolean;
  /** Until when (performance.timeOrigin + performance.now(), ms) this node's lease lets it act as a primary; null: unchanged. */
  leaseUntil: number | null;
}

/** The thread asks for a page of a database's change log (change-pages.ts); the main thread has an executor read it. */
export interface PageRequest {
  type: 'read';
  id: number;
  scope: [org: string, repo: string, database: string];
  since: number;
  limit: number;
}

/** The page's text (`{"events": [...], "version": N, "schema": {...}}`, unparsed on the main thread), or why not (`code` null: not an ApiError). */
export type PageAnswer =
  | { type: 'page'; id: number; body: Uint8Array }
  | { type: 'page'; id: number; error: { code: ErrorCode | null; message: string; details?: Record<string, unknown> } };

export type ToThread = { type: 'hints'; hints: Hint[] } | { type: 'gate'; change: GateChange } | { type: 'seed'; cursors: Cursor[] } | PageAnswer | { type: 'close' };

/** A lane's state as saved in mirrors.sqlite (so a floor built from these never passes what a restart resumes from). */
export interface LaneReport {
  mirror: string;
  org: string;
  repo: string;
  database: string;
  saved: number;
  known: number;
  lastError: string | null;
  failingSince: number | null;
  /** The database no longer exists: forget the lane. */
  dropped: boolean;
}

/** Upper bounds (seconds) of the commit → acknowledgement histogram, `scopebase_mirror_delivery_lag_seconds`. */
export const LAG_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600];

/** Lag observations already put in buckets: one report carries thousands of them as a few numbers. */
export interface LagCounts {
  /** Per bucket of LAG_BUCKETS, not cumulative; the last entry is above every bound. */
  counts: number[];
  sum: number;
}

export function addLag(into: LagCounts, seconds: number): void {
  let i = 0;
  while (i < LAG_BUCKETS.length && seconds > LAG_BUCKETS[i]!) i++;
  into.counts[i] = (into.counts[i] ?? 0) + 1;
  into.sum += seconds;
}

/** Counter increments since the last report, per mirror. */
export interface Tally {
  attempts: Record<string, number>;
  delivered: Record<string, number>;
  skipped: Record<string, number>;
  failures: Record<string, Partial<Record<FailureKind, number>>>;
  lag: Record<string, LagCounts>;
  /** Change-log pages read in the thread and by executors (feed.ts); times a repo's reads passed their budget. */
  reads: { thread: number; executor: number };
  budgetTrips: number;
}

export const emptyTally = (): Tally => ({ attempts: {}, delivered: {}, skipped: {}, failures: {}, lag: {}, reads: { thread: 0, executor: 0 }, budgetTrips: 0 });

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

export type FromThread =
  | { type: 'report'; lanes: LaneReport[]; tally: Tally; yielding: boolean }
  | { type: 'log'; level: LogLevel; obj: Record<string, unknown>; msg: string }
  | { type: 'recovered' }
  | PageRequest
  | { type: 'closed' };
