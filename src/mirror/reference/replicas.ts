// Every replica this mirror keeps: events applied once and in version order, gaps and conflicts healed from snapshots.
import { renameSync } from 'node:fs';
import type { ChangeEvent, Scope } from '../../db/contract.ts';
import type { Logger } from '../../shared/log.ts';
import { currentGeneration, ensureDir, removeReplicaFiles, replicaPath } from './files.ts';
import { prepareSnapshot, Replica } from './replica.ts';
import { ApiError } from '../../shared/errors.ts';

export type Outcome = 'applied' | 'duplicate' | 'bootstrapped';

export interface ReplicaSetOptions {
  root: string;
  logger: Logger;
  /** Downloads the scope's snapshot into `target`. */
  fetchSnapshot(scope: Scope, target: string): Promise<number>;
  /** A replaced generation is about to be deleted: readers elsewhere (executor processes) must let go of it. */
  release(path: string): Promise<void>;
  /** How long an event that arrived early waits for the ones before it before the replica heals from a snapshot. */
  holdMs: number;
  maxOpen: number;
}

interface Waiter {
  version: number;
  resolve: (reached: boolean) => void;
}

const keyOf = (s: Scope) => `${s.org}/${s.repo}/${s.database}`;

export class ReplicaSet {
  private readonly opts: ReplicaSetOptions;
  private readonly open = new Map<string, Replica>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private closed = false;

  constructor(opts: ReplicaSetOptions) {
    this.opts = opts;
  }

  /** The replica of a scope, opened from disk on first use; null when this mirror never heard of it. */
  get(scope: Scope): Replica | null {
    const key = keyOf(scope);
    const hit = this.open.get(key);
    if (hit) {
      this.open.delete(key);
      this.open.set(key, hit);
      return hit;
    }
    const generation = currentGeneration(this.opts.root, scope);
    if (generation === null) return null;
    const replica = new Replica(replicaPath(this.opts.root, scope, generation), generation);
    this.open.set(key, replica);
    this.evict();
    return replica;
  }

  private evict(): void {
    for (const [key, replica] of this.open) {
      if (this.open.size <= this.opts.maxOpen) return;
      if (this.locks.has(key)) continue; // being written: keep
      this.open.delete(key);
      replica.close();
    }
  }

  version(scope: Scope): number | null {
    return this.get(scope)?.version ?? null;
  }

  /** Applies one verified event. Throws `unavailable` when it cannot be applied now (the sender retries). */
  async receive(event: ChangeEvent): Promise<Outcome> {
    const scope: Scope = { org: event.org, repo: event.repo, database: event.database };
    const current = this.version(scope);
    // An early event waits (bounded) for its predecessors, which may be in flight on another connection.
    if (current !== null && event.version > current + 1) await this.waitFor(scope, event.version - 1, this.opts.holdMs);
    return this.exclusive(scope, async () => {
      const replica = this.get(scope);
      if (replica !== null && event.version <= replica.version) return 'duplicate';
      let why: string | null;
      if (replica === null) why = 'first event of this database';
      else if (event.version > replica.version + 1) why = `gap: replica at ${replica.version}, event ${event.version}`;
      // Migrations are replayed from a snapshot: exact schema and data, no reliance on the DDL being deterministic.
      else if (event.type === 'database.migrated') why = 'migration';
      else if (event.changeset === null) why = 'event without a changeset';
      else why = replica.apply(event);
      if (why === null) {
        this.notify(scope);
        return 'applied';
      }
      await this.bootstrap(scope, event.version, why);
      return 'bootstrapped';
    });
  }

  private async exclusive<T>(scope: Scope, work: () => Promise<T>): Promise<T> {
    const key = keyOf(scope);
    const before = this.locks.get(key) ?? Promise.resolve();
    const run = before.catch(() => undefined).then(work);
    this.locks.set(key, run);
    try {
      return await run;
    } finally {
      if (this.locks.get(key) === run) this.locks.delete(key);
    }
  }

  /** Replaces the replica with a fresh snapshot, as generation N+1 beside N; the old one is deleted once released. */
  private async bootstrap(scope: Scope, atLeast: number, why: string): Promise<void> {
    if (this.closed) throw new ApiError('unavailable', 'shutting down', undefined, { 'retry-after': '1' });
    ensureDir(this.opts.root, scope);
    const old = this.get(scope);
    const generation = (old?.generation ?? currentGeneration(this.opts.root, scope) ?? 0) + 1;
    const path = replicaPath(this.opts.root, scope, generation);
    const download = `${path}.download`;
    try {
      await this.opts.fetchSnapshot(scope, download);
      const version = prepareSnapshot(download);
      if (version < atLeast) throw new ApiError('unavailable', `the snapshot is at version ${version}, older than event ${atLeast}`, undefined, { 'retry-after': '1' });
      renameSync(download, path);
    } catch (e) {
      removeReplicaFiles(download);
      this.opts.logger.warn({ ...scope, why, err: e instanceof ApiError ? e.message : String(e) }, 'replica bootstrap failed');
      if (e instanceof ApiError) throw e;
      throw new ApiError('unavailable', 'the snapshot could not be used', undefined, { 'retry-after': '2' });
    }
    const replica = new Replica(path, generation);
    this.open.set(keyOf(scope), replica);
    this.opts.logger.info({ ...scope, why, version: replica.version, generation }, 'replica bootstrapped from snapshot');
    this.notify(scope);
    if (old) {
      old.close();
      await this.opts.release(old.path).catch(() => undefined);
      removeReplicaFiles(old.path);
    }
  }

  /** Resolves true once the replica reached `version`, false after `ms`. */
  waitFor(scope: Scope, version: number, ms: number): Promise<boolean> {
    if ((this.version(scope) ?? -1) >= version) return Promise.resolve(true);
    const key = keyOf(scope);
    return new Promise((resolve) => {
      let set = this.waiters.get(key);
      if (!set) this.waiters.set(key, (set = new Set()));
      const waiter: Waiter = {
        version,
        resolve: (reached) => {
          clearTimeout(timer);
          set.delete(waiter);
          if (set.size === 0 && this.waiters.get(key) === set) this.waiters.delete(key);
          resolve(reached);
        },
      };
      const timer = setTimeout(() => waiter.resolve(false), ms);
      set.add(waiter);
    });
  }

  private notify(scope: Scope): void {
    const set = this.waiters.get(keyOf(scope));
    if (!set) return;
    const version = this.version(scope) ?? -1;
    for (const w of [...set]) if (version >= w.version) w.resolve(true);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.locks.values()]);
    for (const set of this.waiters.values()) for (const w of [...set]) w.resolve(false);
    for (const replica of this.open.values()) replica.close();
    this.open.clear();
  }
}
