// One replica file, as this process knows it: where it is and the version it holds. This process never opens it:
// applying a changeset evaluates the tenant's CHECK constraints, generated columns and index expressions, and even
// reading the version parses the tenant's schema, whose size the tenant picks. The mirror serves every org's
// replicas from one event loop, so all of it runs in executor processes, under the statement time limit
// (ExecutorPool.applyToReplica and openReplica, src/db/executor/copy-ops.ts).
import type { ExecutorPool } from '../../db/executor/pool.ts';
import type { ChangeEvent } from '../../db/contract.ts';

/** What an op on a replica file answers: its version, or why not (`stopped`: its executor was stopped under it). */
export type FileOutcome = { version: number } | { problem: string; stopped?: true };
/** What opening one answers: also the id of the event that made its version (null when unknown: version 0). */
export type StateOutcome = { version: number; lastEventId?: string | null } | { problem: string; stopped?: true };

/** The replica files' ops, run elsewhere than this event loop. Rejects (an ApiError, 503) only when an op could not start. */
export interface ReplicaFiles {
  /** Applies the event in one transaction; answers once it committed (the replica's new version) or why not. */
  apply(path: string, event: ChangeEvent): Promise<FileOutcome>;
  /** Makes a downloaded snapshot a replica (its triggers dropped, WAL on) and closes it; answers its version. */
  prepare(path: string): Promise<StateOutcome>;
  /** An existing replica's version (after a restart). */
  version(path: string): Promise<StateOutcome>;
  /** A replaced generation is about to be deleted: every process lets go of it. */
  release(path: string): Promise<void>;
}

/** The replica ops on the mirror's executor pool, each under `budgetMs` (DB_QUERY_TIMEOUT_MS, as the primary's write). */
export function executorFiles(pool: ExecutorPool, budgetMs: number): ReplicaFiles {
  return {
    apply: (path, event) => pool.applyToReplica(path, Buffer.from(JSON.stringify(event)), budgetMs),
    prepare: (path) => pool.openReplica(path, true, budgetMs),
    version: (path) => pool.openReplica(path, false, budgetMs),
    release: (path) => pool.broadcast({ op: 'forget', path }),
  };
}

export class Replica {
  readonly path: string;
  readonly generation: number;
  /** Its committed version: set from what the executor answered. */
  version: number;
  /** The id of the event that made `version` (applied, or its snapshot's newest): a pull checks the source has the same. */
  lastEventId: string | null;
  /** The id of the restore or import it was taken for: that event delivered again is a duplicate, not another snapshot. */
  replacedBy: string | null = null;

  constructor(path: string, generation: number, state: { version: number; lastEventId?: string | null }) {
    this.path = path;
    this.generation = generation;
    this.version = state.version;
    this.lastEventId = state.lastEventId ?? null;
  }
}
