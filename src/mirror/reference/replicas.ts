// Every replica this mirror keeps: events applied once and in version order, gaps and conflicts healed from snapshots.
// This event loop serves every org's replicas and never opens a replica file: applies, snapshot preparation and
// version reads run in executor processes under the statement time limit (replica.ts, ReplicaFiles).
import { renameSync } from 'node:fs';
import type { ChangeEvent, Scope } from '../../db/contract.ts';
import type { Logger } from '../../shared/log.ts';
import { currentGeneration, ensureDir, removeReplicaFiles, replicaPath } from './files.ts';
import { Replica, type ReplicaFiles } from './replica.ts';
import { AbsentNames } from './absent.ts';
import { ApiError } from '../../shared/errors.ts';
import { StopBackoff } from '../../shared/stop-backoff.ts';

export type Outcome = 'applied' | 'duplicate' | 'bootstrapped';

export interface ReplicaSetOptions {
  root: string;
  logger: Logger;
  /** Downloads the scope's snapshot into `target`. */
  fetchSnapshot(scope: Scope, target: string): Promise<number>;
  /** A page of the source's change log after `since` (a pull: catchUp); without it a replica only hears hooks. */
  fetchChanges?(scope: Scope, since: number): Promise<{ events: ChangeEvent[] } | { gone: number }>;
  /** The ops on replica files, run off this event loop (executorFiles: the mirror's executor pool). */
  files: ReplicaFiles;
  /** How long an event that arrived early waits for the ones before it before the replica heals from a snapshot. */
  holdMs: number;
  /** A monotonic clock in ms, for the backoffs (tests pass their own). */
  now?: () => number;
}

interface Waiter {
  version: number;
  resolve: (reached: boolean) => void;
}

/**
 * After a stopped apply, a database's events heal the replica from snapshots for STOP_BACKOFF_MS, doubling with each
 * stop up to STOP_BACKOFF_MAX_MS, reset by an apply that succeeds: a tenant whose every write's apply runs past the
 * time limit costs the mirror one stopped executor a period, not one a write. After a stopped snapshot preparation
 * (a schema too large to parse in time), the replica is not healed again before the same backoff: 503 until then.
 */
export const STOP_BACKOFF_MS = 10_000;
export const STOP_BACKOFF_MAX_MS = 5 * 60_000;

const keyOf = (s: Scope) => `${s.org}/${s.repo}/${s.database}`;
/** The HTTP status the snapshot source answered, when a download failed on it (snapshot.ts). */
const sourceStatus = (e: ApiError) => (e.details as { sourceStatus?: number } | undefined)?.sourceStatus;
/** A restore or an import: the event says the whole content is new (SPEC 4.11, 4.12). */
const replacesContent = (e: ChangeEvent) => e.type === 'database.restored' || e.type === 'database.imported';
const seconds = (ms: number) => String(Math.max(1, Math.ceil(ms / 1000)));

export class ReplicaSet {
  private readonly opts: ReplicaSetOptions;
  /** Replicas whose version is known: a path and a number each, no connection (this process opens none). */
  private readonly known = new Map<string, Replica>();
  private readonly loading = new Map<string, Promise<Replica | null>>();
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  /** First reads under way (follow): concurrent reads of one database ask the source once. */
  private readonly following = new Map<string, Promise<Replica | null>>();
  /** Databases the source said it lacks, for a moment (follow); an event of one forgets it (receive). */
  private readonly absent: AbsentNames;
  /** Pulls under way, one per database at most (catchUp). */
  private readonly pulls = new Map<string, Promise<void>>();
  /** Databases whose apply was stopped: snapshots only for a while. */
  private readonly applyStops: StopBackoff;
  /** Databases whose snapshot preparation was stopped: no bootstrap for a while. */
  private readonly prepareStops: StopBackoff;
  private closed = false;

  constructor(opts: ReplicaSetOptions) {
    this.opts = opts;
    this.applyStops = new StopBackoff(STOP_BACKOFF_MS, STOP_BACKOFF_MAX_MS, opts.now);
    this.prepareStops = new StopBackoff(STOP_BACKOFF_MS, STOP_BACKOFF_MAX_MS, opts.now);
    this.absent = new AbsentNames(opts.now);
  }

  /** The replica of a scope as known now, without waiting: null when not loaded (see load) or when there is none. */
  get(scope: Scope): Replica | null {
    return this.known.get(keyOf(scope)) ?? null;
  }

  /**
   * The replica of a scope; on first use its version is read from disk, in an executor. Null when this mirror never
   * heard of it. Throws `unavailable` when it cannot be read now.
   */
  load(scope: Scope): Promise<Replica | null> {
    const key = keyOf(scope);
    const hit = this.known.get(key);
    if (hit) return Promise.resolve(hit);
    let loading = this.loading.get(key);
    if (!loading) {
      loading = this.read(scope).finally(() => this.loading.delete(key));
      this.loading.set(key, loading);
    }
    return loading;
  }

  private async read(scope: Scope): Promise<Replica | null> {
    const key = keyOf(scope);
    // Not cleaning leftovers: a bootstrap may be downloading the next generation beside this one.
    const generation = currentGeneration(this.opts.root, scope, false);
    if (generation === null) return null;
    const path = replicaPath(this.opts.root, scope, generation);
    const read = await this.opts.files.version(path);
    const hit = this.known.get(key); // a bootstrap finished meanwhile
    if (hit) return hit;
    if ('problem' in read) throw new ApiError('unavailable', `the replica cannot be read now: ${read.problem}`, undefined, { 'retry-after': '1' });
    const replica = new Replica(path, generation, read);
    this.known.set(key, replica);
    return replica;
  }

  /**
   * The replica of a scope a read names, taken from the source when this mirror holds none yet (a database at version
   * 0, one written before this mirror's DATA_DIR was made, one whose events all went to an earlier mirror of this
   * name): a replica follows every database it hears about, and a read is hearing about it. Null when the source has
   * no such database. Concurrent reads of one database share one question to the source, and its "no such database"
   * answers the reads of the next ABSENT_FOR_MS (absent.ts): a client cannot make the mirror ask once per read.
   */
  async follow(scope: Scope): Promise<Replica | null> {
    const known = await this.load(scope);
    if (known !== null) return known;
    const key = keyOf(scope);
    if (this.absent.has(key)) return null;
    let following = this.following.get(key);
    if (following === undefined) {
      following = this.exclusive(scope, async () => {
        const now = await this.load(scope); // a hook's bootstrap may have run meanwhile
        if (now !== null) return now;
        try {
          await this.bootstrap(scope, 0, 'first read of this database');
        } catch (e) {
          if (!(e instanceof ApiError && sourceStatus(e) === 404)) throw e;
          this.absent.add(key);
          return null;
        }
        return this.get(scope);
      }).finally(() => this.following.delete(key));
      this.following.set(key, following);
    }
    return following;
  }

  version(scope: Scope): number | null {
    return this.get(scope)?.version ?? null;
  }

  /** Applies one verified event. Throws `unavailable` when it cannot be applied now (the sender retries). */
  async receive(event: ChangeEvent): Promise<Outcome> {
    const scope: Scope = { org: event.org, repo: event.repo, database: event.database };
    const key = keyOf(scope);
    this.absent.delete(key); // the database exists: reads ask the source again, even if this event cannot be applied now
    const current = (await this.load(scope).catch(() => null))?.version ?? null;
    // An early event waits (bounded) for its predecessors, which may be in flight on another connection.
    if (current !== null && event.version > current + 1) await this.waitFor(scope, event.version - 1, this.opts.holdMs);
    return this.exclusive(scope, async () => {
      this.absent.delete(key); // a first read's 404 that was under way when the event came
      let replica: Replica | null;
      let unreadable: string | null = null;
      try {
        replica = await this.load(scope);
      } catch (e) {
        replica = null;
        unreadable = (e as Error).message;
      }
      // A restore or import at or below our version: the primary's versions restarted (a backup was restored into
      // it, docs/backups.md), so the ones we hold past it are another history's. Unless it is the very event this replica
      // was taken for, delivered again (at least once): a snapshot each time looped whenever one took the sender's timeout.
      const restarted = replica !== null && event.version <= replica.version && replacesContent(event) && replica.replacedBy !== event.id;
      if (replica !== null && event.version <= replica.version && !restarted) return 'duplicate';
      const stop = this.applyStops.remaining(key);
      let why: string | null;
      if (unreadable !== null) why = unreadable;
      else if (restarted) why = `${event.type} at version ${event.version}, replica at ${replica!.version}: the primary's versions restarted`;
      else if (replica === null) why = 'first event of this database';
      else if (event.version > replica.version + 1) why = `gap: replica at ${replica.version}, event ${event.version}`;
      // Migrations are replayed from a snapshot: exact schema and data, no reliance on the DDL being deterministic.
      else if (event.type === 'database.migrated') why = 'migration';
      else if (event.changeset === null) why = 'event without a changeset';
      else if (stop > 0) why = `snapshots only for ${seconds(stop)} s more: an apply was stopped`;
      else {
        // In an executor, under the time limit: the changeset runs the tenant's expressions (replica.ts).
        const applied = await this.opts.files.apply(replica.path, event);
        if ('version' in applied) {
          replica.version = applied.version;
          replica.lastEventId = event.id;
          this.applyStops.clear(key);
          this.notify(scope);
          return 'applied';
        }
        why = applied.problem;
        if (applied.stopped) {
          const snapshotsOnlyMs = this.applyStops.penalize(key);
          this.opts.logger.warn({ ...scope, version: event.version, why, snapshotsOnlyMs }, 'replica apply stopped: the database heals from snapshots for a while');
        }
      }
      await this.bootstrap(scope, event.version, why);
      if (replacesContent(event)) this.get(scope)!.replacedBy = event.id;
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
    const key = keyOf(scope);
    const left = this.prepareStops.remaining(key);
    if (left > 0) {
      throw new ApiError('unavailable', `this replica cannot heal for ${seconds(left)} s more: preparing its last snapshot was stopped`, undefined, { 'retry-after': seconds(left) });
    }
    ensureDir(this.opts.root, scope);
    const old = this.known.get(key) ?? null;
    const onDisk = currentGeneration(this.opts.root, scope); // also removes leftovers: only this bootstrap runs here
    const previous = old?.path ?? (onDisk === null ? null : replicaPath(this.opts.root, scope, onDisk));
    const generation = Math.max(old?.generation ?? 0, onDisk ?? 0) + 1;
    const path = replicaPath(this.opts.root, scope, generation);
    const download = `${path}.download`;
    let state: { version: number; lastEventId?: string | null };
    try {
      await this.opts.fetchSnapshot(scope, download);
      // Opening it parses the tenant's schema (and drops its triggers): in an executor, under the time limit.
      const prepared = await this.opts.files.prepare(download);
      if ('problem' in prepared) {
        if (!prepared.stopped) throw new ApiError('unavailable', prepared.problem, undefined, { 'retry-after': '2' });
        const ms = this.prepareStops.penalize(key);
        throw new ApiError('unavailable', `${prepared.problem}; this replica heals again in ${seconds(ms)} s`, undefined, { 'retry-after': seconds(ms) });
      }
      state = prepared;
      if (state.version < atLeast) throw new ApiError('unavailable', `the snapshot is at version ${state.version}, older than event ${atLeast}`, undefined, { 'retry-after': '1' });
      renameSync(download, path);
    } catch (e) {
      // An executor may still hold the download (a preparation that failed after opening it).
      await this.opts.files.release(download).catch(() => undefined);
      removeReplicaFiles(download);
      // A database the source does not have is the reader's answer (404), not this mirror's problem.
      if (!(e instanceof ApiError && sourceStatus(e) === 404)) this.opts.logger.warn({ ...scope, why, err: e instanceof ApiError ? e.message : String(e) }, 'replica bootstrap failed');
      if (e instanceof ApiError) throw e;
      throw new ApiError('unavailable', 'the snapshot could not be used', undefined, { 'retry-after': '2' });
    }
    this.prepareStops.clear(key);
    const replica = new Replica(path, generation, state);
    this.known.set(key, replica);
    this.opts.logger.info({ ...scope, why, version: state.version, generation }, 'replica bootstrapped from snapshot');
    this.notify(scope);
    if (previous !== null) {
      await this.opts.files.release(previous).catch(() => undefined);
      removeReplicaFiles(previous);
    }
  }

  /**
   * Pulls the source's change log into the replica until it holds `version` (a read waiting on it with minVersion):
   * the sender retries a mirror that was down at its backoff, up to DB_MIRROR_MAX_BACKOFF_MS apart, while a replica
   * asked for a version knows the source has it. The events go through `receive`, so order, duplicates (a hook
   * bringing the same one) and gaps are handled as for hooks. In the background, one pull per database at a time.
   */
  catchUp(scope: Scope, version: number): void {
    const key = keyOf(scope);
    const fetch = this.opts.fetchChanges;
    if (fetch === undefined || this.pulls.has(key) || this.closed) return;
    const pull = async () => {
      let since = this.version(scope);
      let jumped = false;
      // The first page starts one event early: the source's event at the replica's version must be the one it holds.
      // Another id means the source's versions restarted (a whole-instance restore whose event has not come yet): the
      // events past it are another history's, and applied onto this one's rows they diverged silently.
      let seen = this.get(scope);
      while (since !== null && since < version && !this.closed) {
        const check = seen?.lastEventId != null && since > 0 ? { replica: seen, id: seen.lastEventId } : null;
        seen = null;
        const from = since;
        const page = await fetch(scope, check ? since - 1 : since);
        if ('gone' in page) {
          if (jumped) return;
          jumped = true;
          // The replica is older than the kept log: nothing can fill the gap, so a snapshot now (a hook's gap would wait holdMs).
          await this.heal(scope, (r) => (r?.version ?? Infinity) < page.gone - 1, page.gone, `the source keeps events from ${page.gone} only, replica at ${from}`);
          since = this.version(scope);
          continue;
        }
        const first = page.events[0];
        if (check && first?.version === from && first.id !== check.id) {
          await this.heal(scope, (r) => r === check.replica && r.version === from, from, `the source's event ${from} is not the one this replica holds: its versions restarted (a restore)`);
          since = this.version(scope);
          continue;
        }
        const events = page.events.filter((e) => e.version > from);
        if (events.length === 0) return;
        for (const event of events) await this.receive(event);
        since = Math.max(this.version(scope) ?? since, events.at(-1)!.version);
      }
    };
    const run = pull()
      .catch((e: unknown) => this.opts.logger.debug({ ...scope, err: e instanceof Error ? e.message : String(e) }, 'replica pull failed'))
      .finally(() => this.pulls.delete(key));
    this.pulls.set(key, run);
  }

  /** A pull's snapshot, in the database's turn, unless a hook changed the replica meanwhile (`still`: it is as the pull saw it). */
  private heal(scope: Scope, still: (replica: Replica | null) => boolean, atLeast: number, why: string): Promise<void> {
    return this.exclusive(scope, async () => {
      if (still(this.get(scope))) await this.bootstrap(scope, atLeast, why);
    });
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
    await Promise.allSettled([...this.pulls.values(), ...this.locks.values()]);
    for (const set of this.waiters.values()) for (const w of [...set]) w.resolve(false);
    this.known.clear();
  }
}
