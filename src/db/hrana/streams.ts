// Hrana streams between pipeline requests, tracked by batons: unguessable (128 random bits), bound to their
// (org, repo, database), good for one request only (each reply names the next), dropped when idle.
import { randomBytes } from 'node:crypto';
import { ApiError } from '../../shared/errors.ts';
import type { StreamTx } from './transaction.ts';

/** SQL texts one stream may store (store_sql), and their total size. */
const MAX_SQLS = 1000;
const MAX_SQL_BYTES = 4 * 1024 * 1024;

export class StreamState {
  /** `org/repo/database`: a baton works for this database only. */
  readonly key: string;
  /** `org/repo`: the tenant its stream counts against. */
  readonly repo: string;
  readonly sqls = new Map<number, string>();
  private sqlBytes = 0;
  idleTimer: NodeJS.Timeout | null = null;
  /** Its open interactive transaction, if any. */
  tx: StreamTx | null = null;
  /** `PRAGMA foreign_keys = OFF` ran on it (and no `= ON` since): its writes run with foreign keys off, as on a connection. */
  foreignKeysOff = false;

  constructor(key: string) {
    this.key = key;
    this.repo = key.slice(0, key.lastIndexOf('/'));
  }

  storeSql(id: number, sql: string): void {
    if (!Number.isSafeInteger(id)) throw new ApiError('invalid_request', `store_sql: "sql_id" must be a whole number, got ${JSON.stringify(id)}`);
    if (this.sqls.has(id)) throw new ApiError('invalid_request', `store_sql: sql_id ${id} is already stored; close_sql it first`);
    if (this.sqls.size >= MAX_SQLS || this.sqlBytes + sql.length > MAX_SQL_BYTES) {
      throw new ApiError('payload_too_large', `a stream stores at most ${MAX_SQLS} SQL texts (${MAX_SQL_BYTES} bytes); close_sql the ones no longer used`);
    }
    this.sqlBytes += sql.length;
    this.sqls.set(id, sql);
  }
}

/**
 * Open streams per repo: past it, the repo's own least recently used stream is closed. In all, DB_MAX_STREAMS
 * (10,000): past it, the least recently used stream of the repo holding the most is closed, so that no repo, nor an
 * org with many repos, can keep another's clients out.
 */
export const MAX_STREAMS_PER_REPO = 256;

export class Streams {
  /** Batons in order of last use (take removes, keep adds): the first of a repo is its least recently used. */
  private readonly open = new Map<string, StreamState>();
  private readonly perRepo = new Map<string, number>();
  private readonly idleMs: number;
  private readonly maxStreams: number;

  constructor(idleMs: number, maxStreams: number) {
    this.idleMs = idleMs;
    this.maxStreams = maxStreams;
  }

  private drop(baton: string, state: StreamState, why: string | null): void {
    if (!this.open.delete(baton)) return;
    const n = (this.perRepo.get(state.repo) ?? 1) - 1;
    if (n <= 0) this.perRepo.delete(state.repo);
    else this.perRepo.set(state.repo, n);
    if (state.idleTimer) clearTimeout(state.idleTimer);
    if (why) state.tx?.abandon(why);
  }

  /** The stream a request names (its baton is spent now), or a new one for a null baton. */
  take(baton: unknown, key: string): StreamState {
    if (baton === null || baton === undefined) return new StreamState(key);
    const state = typeof baton === 'string' ? this.open.get(baton) : undefined;
    if (!state || state.key !== key) {
      throw new ApiError('invalid_request', 'unknown baton: the stream was closed, expired after DB_STREAM_IDLE_MS, belongs to another database, or this baton was already used');
    }
    this.drop(baton as string, state, null);
    return state;
  }

  /** Keeps the stream for its next request, under a fresh baton. */
  keep(state: StreamState): string {
    if ((this.perRepo.get(state.repo) ?? 0) >= MAX_STREAMS_PER_REPO) {
      this.dropOldest(state.repo, `its repo opened more than ${MAX_STREAMS_PER_REPO} streams and it was the least recently used`);
    } else if (this.open.size >= this.maxStreams) {
      let busiest = state.repo;
      for (const [repo, n] of this.perRepo) if (n > (this.perRepo.get(busiest) ?? 0)) busiest = repo;
      this.dropOldest(busiest, `the server had DB_MAX_STREAMS (${this.maxStreams}) streams open, its repo the most, and it was that repo's least recently used`);
    }
    const baton = randomBytes(16).toString('base64url');
    this.open.set(baton, state);
    this.perRepo.set(state.repo, (this.perRepo.get(state.repo) ?? 0) + 1);
    state.idleTimer = setTimeout(() => this.drop(baton, state, `its stream was unused for ${this.idleMs} ms (DB_STREAM_IDLE_MS) and was closed`), this.idleMs).unref();
    return baton;
  }

  private dropOldest(repo: string, why: string): void {
    for (const [baton, s] of this.open) {
      if (s.repo === repo) {
        this.drop(baton, s, why);
        return;
      }
    }
  }

  close(): void {
    for (const s of this.open.values()) {
      if (s.idleTimer) clearTimeout(s.idleTimer);
      s.tx?.abandon('the service is stopping');
    }
    this.open.clear();
    this.perRepo.clear();
  }
}
