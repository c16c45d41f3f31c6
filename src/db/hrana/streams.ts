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
    if (this.sqls.size >= MAX_SQLS || this.sqlBytes + sql.length > MAX_SQL_BYTES) {
      throw new ApiError('payload_too_large', `a stream stores at most ${MAX_SQLS} SQL texts (${MAX_SQL_BYTES} bytes); close_sql the ones no longer used`);
    }
    this.sqlBytes += sql.length;
    this.sqls.set(id, sql);
  }
}

/** Open streams per repo (past it, the repo's own oldest stream is closed) and in all (past it, refused). */
export const MAX_STREAMS_PER_REPO = 256;
export const MAX_STREAMS = 10_000;

export class Streams {
  private readonly open = new Map<string, StreamState>();
  private readonly perRepo = new Map<string, number>();
  private readonly idleMs: number;

  constructor(idleMs: number) {
    this.idleMs = idleMs;
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
    if (baton === null || baton === undefined) {
      // Refused before anything runs: a stream opened now might not be kept.
      if (this.open.size >= MAX_STREAMS) throw new ApiError('unavailable', `the server has ${MAX_STREAMS} libSQL streams open; nothing of this request ran, retry`, { committed: false }, { 'retry-after': '1' });
      return new StreamState(key);
    }
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
      for (const [baton, s] of this.open) {
        if (s.repo === state.repo) {
          this.drop(baton, s, `its repo opened more than ${MAX_STREAMS_PER_REPO} streams and it was the oldest`);
          break;
        }
      }
    }
    const baton = randomBytes(16).toString('base64url');
    this.open.set(baton, state);
    this.perRepo.set(state.repo, (this.perRepo.get(state.repo) ?? 0) + 1);
    state.idleTimer = setTimeout(() => this.drop(baton, state, `its stream was unused for ${this.idleMs} ms (DB_STREAM_IDLE_MS) and was closed`), this.idleMs).unref();
    return baton;
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
