// What the delivery engine is given and what it offers (engine.ts): the product's thread (thread.ts) and the tests wire it.
import type { ChangeFeed, MirrorReport, Scope } from '../../db/contract.ts';
import type { MirrorConfig } from '../../shared/config.ts';
import type { Lane } from './lane.ts';
import type { FailureKind } from './sender.ts';

/** The log calls delivery makes (a pino logger fits; the delivery thread relays them to the main thread's logger). */
export interface DeliveryLog {
  debug(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** What delivery counts (Prometheus in the main thread; counted and relayed from the delivery thread). */
export interface DeliveryMetrics {
  attempt(mirror: string): void;
  failure(mirror: string, kind: FailureKind): void;
  delivered(mirror: string): void;
  skipped(mirror: string, events: number): void;
  /** Seconds from commit to acknowledgement. */
  lag(mirror: string, seconds: number): void;
}

export interface DeliveryOptions {
  feed: ChangeFeed;
  mirrors: MirrorConfig[];
  dataDir: string;
  log: DeliveryLog;
  metrics: DeliveryMetrics;
  timeoutMs: number;
  maxBackoffMs: number;
  stallAfterMs: number;
  /** Concurrent deliveries per mirror: a slow mirror uses its own slots only. */
  concurrency: number;
  baseBackoffMs?: number;
  recoveryConcurrency?: number;
  /** Called after a lane's state was saved to mirrors.sqlite (or the lane was dropped: its database is gone). */
  onSaved?(lane: Lane, dropped: boolean): void;
  /** True while the machine has no CPU to spare (cpu-pressure.ts): delivery then trickles. */
  shouldYield?(): boolean;
  /** A cluster node (gate.ts): may this event leave now? A lane that may not waits for the next notice. */
  gate?(scope: Scope, version: number): boolean;
}

export interface DeliveryEngine extends MirrorReport {
  /** Resolves when the start-up scan of databases on disk has finished (it runs in the background). */
  readonly recovered: Promise<void>;
  /** Every lane, for tests and diagnostics. */
  lanes(): Iterable<Lane>;
  /** Something above `version` may exist in the database's change log: a commit hint, or a status read. */
  notice(scope: Scope, version: number): void;
  /** Another node reported the mirror to have acknowledged `version` of the database (a cluster's follower): resume from there at least. */
  seed(scope: Scope, mirror: string, version: number): void;
  close(): Promise<void>;
}
