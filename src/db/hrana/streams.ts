// Hrana streams between pipeline requests, tracked by batons: unguessable (128 random bits), bound to their
// (org, repo, database), good for one request only (each reply names the next), dropped when idle.
import { randomBytes } from 'node:crypto';
import { ApiError } from '../../shared/errors.ts';
import type { StreamTx } from './transaction.ts';

/** SQL texts one stream may store (store_sql), and their total size. */
const MAX_SQLS = 1000;
const MAX_SQL_BYTES = 4 * 1024 * 1024;

export class StreamState {
  readonly key: string;
  readonly sqls = new Map<number, string>();
  private sqlBytes = 0;
  idleTimer: NodeJS.Timeout | null = null;
  /** Its open interactive transaction, if any. */
  tx: StreamTx | null = null;

  constructor(key: string) {
    this.key = key;
  }

  storeSql(id: number, sql: string): void {
    if (this.sqls.size >= MAX_SQLS || this.sqlBytes + sql.length > MAX_SQL_BYTES) {
      throw new ApiError('payload_too_large', `a stream stores at most ${MAX_SQLS} SQL texts (${MAX_SQL_BYTES} bytes); close_sql the ones no longer used`);
    }
    this.sqlBytes += sql.length;
    this.sqls.set(id, sql);
  }
}

export class Streams {
  private readonly open = new Map<string, StreamState>();
  private readonly idleMs: number;
  private readonly max: number;

  constructor(idleMs: number, max = 10_000) {
    this.idleMs = idleMs;
    this.max = max;
  }

  /** The stream a request names (its baton is spent now), or a new one for a null baton. */
  take(baton: unknown, key: string): StreamState {
    if (baton === null || baton === undefined) return new StreamState(key);
    const state = typeof baton === 'string' ? this.open.get(baton) : undefined;
    if (!state || state.key !== key) {
      throw new ApiError('invalid_request', 'unknown baton: the stream was closed, expired after DB_STREAM_IDLE_MS, belongs to another database, or this baton was already used');
    }
    this.open.delete(baton as string);
    if (state.idleTimer) clearTimeout(state.idleTimer);
    return state;
  }

  /** Keeps the stream for its next request, under a fresh baton. */
  keep(state: StreamState): string {
    if (this.open.size >= this.max) {
      const [oldest, s] = this.open.entries().next().value!;
      this.open.delete(oldest);
      if (s.idleTimer) clearTimeout(s.idleTimer);
      s.tx?.abandon(`${this.max} streams were open and it was the oldest`);
    }
    const baton = randomBytes(16).toString('base64url');
    this.open.set(baton, state);
    state.idleTimer = setTimeout(() => {
      this.open.delete(baton);
      state.tx?.abandon(`its stream was unused for ${this.idleMs} ms (DB_STREAM_IDLE_MS) and was closed`);
    }, this.idleMs).unref();
    return baton;
  }

  close(): void {
    for (const s of this.open.values()) {
      if (s.idleTimer) clearTimeout(s.idleTimer);
      s.tx?.abandon('the service is stopping');
    }
    this.open.clear();
  }
}
