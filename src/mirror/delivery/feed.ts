// The delivery thread's change feed. A page is read in the thread (change-log.ts: the fast path, for every repo)
// unless that would parse a schema not known to be small, or the repo's reads there passed their budget
// (read-budget.ts): then one of the db service's executors reads it (change-pages.ts), the tenant's own share of them.
import type { ChangeFeed, Scope } from '../../db/contract.ts';
import { Layout } from '../../db/layout.ts';
import { ApiError } from '../../shared/errors.ts';
import { ChangeLogFiles, NOT_HERE, type Page } from './change-log.ts';
import type { ChangeLogPages } from './change-pages.ts';
import { scopeKey } from './lane.ts';
import { ReadBudget, READ_WINDOW_MS } from './read-budget.ts';

export interface FeedEvents {
  /** A page (or a version) was read: in the thread or by an executor. */
  read(by: 'thread' | 'executor'): void;
  /** The repo's reads in the thread passed their budget: executors read them for `periodMs`. */
  tripped(org: string, repo: string, periodMs: number): void;
}

export class DeliveryFeed implements ChangeFeed {
  private readonly layout: Layout;
  private readonly files: ChangeLogFiles;
  private readonly pages: ChangeLogPages;
  private readonly events: FeedEvents;
  private readonly budget = new ReadBudget();
  private readonly listeners: ((scope: Scope, version: number) => void)[] = [];
  /**
   * Reads asked for since the last hint, within this event-loop turn: the other mirror's lane asking for the same page
   * gets the same read. Never longer: a hint may say the log holds more than a read begun before it saw.
   */
  private readonly shared = new Map<string, Promise<Page>>();
  private readonly sweeper: NodeJS.Timeout;

  /** `dbRoot` is the db service's DATA_DIR/db. */
  constructor(dbRoot: string, pages: ChangeLogPages, events: FeedEvents) {
    this.layout = new Layout(dbRoot);
    this.files = new ChangeLogFiles(dbRoot);
    this.pages = pages;
    this.events = events;
    this.sweeper = setInterval(() => this.budget.sweep(), READ_WINDOW_MS);
    this.sweeper.unref();
  }

  /** The change log may hold events up to `version` (a commit hint, or a cluster's grant). */
  hint(scope: Scope, version: number): void {
    this.shared.clear();
    for (const l of this.listeners) l(scope, version);
  }

  onCommit(listener: (scope: Scope, version: number) => void): void {
    this.listeners.push(listener);
  }

  readChanges(scope: Scope, since: number, limit: number): Promise<Page> {
    const key = `${scopeKey(scope)}\n${since}\n${limit}`;
    let read = this.shared.get(key);
    if (read) return read;
    if (this.shared.size === 0) setImmediate(() => this.shared.clear());
    this.shared.set(key, (read = this.read(scope, since, limit)));
    return read;
  }

  async currentVersion(scope: Scope): Promise<number | null> {
    const repo = `${scope.org}/${scope.repo}`;
    if (!this.budget.offThread(repo)) {
      const version = this.inThread(scope, repo, () => this.files.version(scope));
      if (version !== NOT_HERE) return version;
    }
    try {
      return (await this.byExecutor(scope, Number.MAX_SAFE_INTEGER, 1)).version;
    } catch (e) {
      if (e instanceof ApiError && e.code === 'database_not_found') return null;
      throw e;
    }
  }

  listDatabases(): AsyncIterable<Scope> {
    return this.layout.all();
  }

  close(): void {
    clearInterval(this.sweeper);
    this.shared.clear();
    this.pages.close();
    this.files.close();
  }

  /** In the thread when allowed, at once (not after an await: the page is as new as what the caller knows). */
  private async read(scope: Scope, since: number, limit: number): Promise<Page> {
    const repo = `${scope.org}/${scope.repo}`;
    if (!this.budget.offThread(repo)) {
      const page = this.inThread(scope, repo, () => this.files.read(scope, since, limit));
      if (page !== NOT_HERE) return page;
    }
    return this.byExecutor(scope, since, limit);
  }

  /**
   * Runs a read in the thread and counts its time, open and schema parse included, to the repo's budget: the thread's
   * CPU time, not the clock's, since on a busy machine the (niced) thread waits for a core, and that is no repo's doing.
   */
  private inThread<T>(scope: Scope, repo: string, read: () => T | typeof NOT_HERE): T | typeof NOT_HERE {
    const started = process.threadCpuUsage();
    let result: T | typeof NOT_HERE = NOT_HERE;
    try {
      result = read();
      return result;
    } finally {
      if (result !== NOT_HERE) this.events.read('thread');
      const { user, system } = process.threadCpuUsage(started);
      const periodMs = this.budget.spend(repo, (user + system) / 1000);
      if (periodMs > 0) this.events.tripped(scope.org, scope.repo, periodMs);
    }
  }

  private async byExecutor(scope: Scope, since: number, limit: number): Promise<Page> {
    const file = this.files.identify(scope); // before the read: what it reports belongs to this file or a newer one
    const page = await this.pages.read(scope, since, limit);
    this.events.read('executor');
    if (file) this.files.learn(scope, file, page.schema);
    return { events: page.events, version: page.version };
  }
}
