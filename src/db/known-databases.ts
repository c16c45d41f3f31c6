// Which databases exist, and SPEC 4.8's bound on how many a repo may create: the service's one answer to both.
import { mkdirSync } from 'node:fs';
import { ApiError } from '../shared/errors.ts';
import type { Scope } from './contract.ts';
import type { ExecutorPool } from './executor/pool.ts';
import type { Layout } from './layout.ts';

export class KnownDatabases {
  private readonly layout: Layout;
  private readonly pool: ExecutorPool;
  private readonly maxPerRepo: number;
  /** Per repo directory: databases being created now, and by how many requests. */
  private readonly creating = new Map<string, Map<string, number>>();
  /** Databases known to exist: nothing deletes a database but a failed first write, which forgets it here. */
  private readonly known = new Set<string>();

  constructor(layout: Layout, pool: ExecutorPool, maxPerRepo: number) {
    this.layout = layout;
    this.pool = pool;
    this.maxPerRepo = maxPerRepo;
  }

  exists(scope: Scope): boolean {
    const path = this.layout.path(scope);
    if (this.known.has(path)) return true;
    if (!this.layout.exists(scope)) return false;
    if (this.known.size > 100_000) this.known.clear();
    this.known.add(path);
    return true;
  }

  /**
   * SPEC 4.8: creating a database is refused past DB_MAX_DATABASES_PER_REPO, counting creations under way. A name is
   * counted once, whether its file exists yet or not (an open transaction's new database has one) and however many
   * requests create it at once.
   */
  beforeCreate(scope: Scope, path: string): (() => void) | null {
    if (this.exists(scope)) return null;
    const dir = this.layout.repoDir(scope.org, scope.repo);
    const underWay = this.creating.get(dir) ?? new Map<string, number>();
    const names = new Set([...this.layout.databases(scope.org, scope.repo), ...underWay.keys()]);
    const max = this.maxPerRepo;
    if (!names.has(scope.database) && names.size >= max) {
      throw new ApiError('quota_exceeded', `the repo already has ${max === 1 ? '1 database' : `${max} databases`} (DB_MAX_DATABASES_PER_REPO)`);
    }
    mkdirSync(dir, { recursive: true });
    underWay.set(scope.database, (underWay.get(scope.database) ?? 0) + 1);
    this.creating.set(dir, underWay);
    return () => {
      const n = (underWay.get(scope.database) ?? 1) - 1;
      if (n > 0) underWay.set(scope.database, n);
      else underWay.delete(scope.database);
      if (underWay.size === 0 && this.creating.get(dir) === underWay) this.creating.delete(dir);
      if (!this.layout.exists(scope)) {
        this.known.delete(path);
        void this.pool.broadcast({ op: 'forget', path });
      }
    };
  }

  /** The executors close the database's file: another writer (a cluster's follower path) is about to change it. */
  async forget(scope: Scope): Promise<void> {
    const path = this.layout.path(scope);
    this.known.delete(path);
    await this.pool.broadcast({ op: 'forget', path });
  }
}
