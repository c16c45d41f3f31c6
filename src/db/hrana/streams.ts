// Hrana streams between pipeline requests, tracked by batons: unguessable (128 random bits), bound to their
// (org, repo, database), good for one request only (each reply names the next), dropped when idle.
import { randomBytes } from 'node:crypto';
import { ApiError } from '../../shared/errors.ts';
import type { StreamTx } from './transaction.ts';

/** SQL texts one stream may store (store_sql), and the bytes they count as (`storedBytes`). */
const MAX_SQLS = 1000;
const MAX_SQL_BYTES = 4 * 1024 * 1024;
/**
 * What a stored text's entry costs besides its characters: the Map slot, the key and the string's header. Measured
 * on Node 24 (texts parsed from JSON as a pipeline's are, kept in a Map): 45 bytes an entry with an empty text,
 * 93 with a 29-character one; 64 bounds the part that is not characters.
 */
const ENTRY_BYTES = 64;

/**
 * The bytes a stored text counts as: two per UTF-16 code unit (V8 keeps a string one byte a character only while
 * every character is Latin-1, two otherwise: two per unit never undercounts what the heap holds), and its entry.
 */
export function storedBytes(sql: string): number {
  return 2 * sql.length + ENTRY_BYTES;
}

const HOW_COUNTED = 'a text counts 2 bytes per character and 64 for its entry';

/**
 * Bytes of stored SQL every stream of a repo keeps (DB_STORED_SQL_MAX_BYTES_PER_REPO), and every stream of this
 * process (DB_STORED_SQL_MAX_BYTES), between requests: with 256 streams per repo and DB_MAX_STREAMS in all, the
 * per-stream cap alone would let a few repos hold more than the heap. Taken by store_sql, given back by close_sql
 * and when the stream closes, expires or is closed to make room.
 */
export class SqlBudget {
  private readonly perRepo = new Map<string, number>();
  private all = 0;
  readonly maxPerRepo: number;
  readonly max: number;
  /** Closes streams to free `bytes` when the process's budget is full (Streams.freeBytes). */
  makeRoom: ((bytes: number) => void) | null = null;

  constructor(maxPerRepo: number, max: number) {
    this.maxPerRepo = maxPerRepo;
    this.max = max;
  }

  take(repo: string, bytes: number): void {
    const mine = this.perRepo.get(repo) ?? 0;
    if (mine + bytes > this.maxPerRepo) {
      throw new ApiError('payload_too_large', `this repo's streams store at most ${this.maxPerRepo} bytes of SQL texts (DB_STORED_SQL_MAX_BYTES_PER_REPO; ${HOW_COUNTED}), ${mine} are stored and this one is ${bytes}; close_sql the ones no longer used, or close streams`);
    }
    // Full: the repo storing the most gives way (its least recently used streams), as DB_MAX_STREAMS does, so
    // that a few repos at their own budget cannot keep every other repo's clients from storing anything.
    if (this.all + bytes > this.max) this.makeRoom?.(this.all + bytes - this.max);
    if (this.all + bytes > this.max) {
      throw new ApiError('payload_too_large', `the server's streams store at most ${this.max} bytes of SQL texts in all (DB_STORED_SQL_MAX_BYTES; ${HOW_COUNTED}), and it is full; send the SQL text itself instead of its sql_id, or retry once other streams have closed`);
    }
    this.perRepo.set(repo, mine + bytes);
    this.all += bytes;
  }

  /** The repo whose streams store the most, if any stores anything. */
  heaviest(): string | undefined {
    let top: string | undefined;
    for (const [repo, n] of this.perRepo) if (top === undefined || n > this.perRepo.get(top)!) top = repo;
    return top;
  }

  give(repo: string, bytes: number): void {
    const n = (this.perRepo.get(repo) ?? 0) - bytes;
    if (n <= 0) this.perRepo.delete(repo);
    else this.perRepo.set(repo, n);
    this.all = Math.max(0, this.all - bytes);
  }
}

export class StreamState {
  /** `org/repo/database`: a baton works for this database only. */
  readonly key: string;
  /** `org/repo`: the tenant its stream counts against. */
  readonly repo: string;
  private readonly sqls = new Map<number, string>();
  /** What its stored texts count as (`storedBytes`), taken from `budget`. */
  private sqlBytes = 0;
  get storedSqlBytes(): number {
    return this.sqlBytes;
  }
  private readonly budget: SqlBudget;
  idleTimer: NodeJS.Timeout | null = null;
  /** Its open interactive transaction, if any. */
  tx: StreamTx | null = null;
  /** `PRAGMA foreign_keys = OFF` ran on it (and no `= ON` since): its writes run with foreign keys off, as on a connection. */
  foreignKeysOff = false;

  constructor(key: string, budget: SqlBudget) {
    this.key = key;
    this.repo = key.slice(0, key.lastIndexOf('/'));
    this.budget = budget;
  }

  sql(id: number): string | undefined {
    return this.sqls.get(id);
  }

  storeSql(id: number, sql: string): void {
    if (!Number.isSafeInteger(id)) throw new ApiError('invalid_request', `store_sql: "sql_id" must be a whole number, got ${JSON.stringify(id)}`);
    if (this.sqls.has(id)) throw new ApiError('invalid_request', `store_sql: sql_id ${id} is already stored; close_sql it first`);
    const bytes = storedBytes(sql);
    if (this.sqls.size >= MAX_SQLS || this.sqlBytes + bytes > MAX_SQL_BYTES) {
      throw new ApiError('payload_too_large', `a stream stores at most ${MAX_SQLS} SQL texts (${MAX_SQL_BYTES} bytes; ${HOW_COUNTED}); close_sql the ones no longer used`);
    }
    this.budget.take(this.repo, bytes);
    this.sqlBytes += bytes;
    this.sqls.set(id, sql);
  }

  closeSql(id: number): void {
    const sql = this.sqls.get(id);
    if (sql === undefined) return;
    this.sqls.delete(id);
    const bytes = storedBytes(sql);
    this.sqlBytes -= bytes;
    this.budget.give(this.repo, bytes);
  }

  /** The stream is over (closed, expired, closed to make room, the service stopping): its stored SQL is let go. */
  release(): void {
    this.sqls.clear();
    if (this.sqlBytes > 0) this.budget.give(this.repo, this.sqlBytes);
    this.sqlBytes = 0;
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
  private readonly budget: SqlBudget;

  constructor(idleMs: number, maxStreams: number, budget: SqlBudget) {
    this.idleMs = idleMs;
    this.maxStreams = maxStreams;
    this.budget = budget;
    budget.makeRoom = (bytes) => this.freeBytes(bytes);
  }

  /** The server's stored SQL is full: the repo storing the most loses its least recently used streams until `need` bytes are free. */
  private freeBytes(need: number): void {
    while (need > 0) {
      const repo = this.budget.heaviest();
      let victim: [string, StreamState] | undefined;
      for (const entry of this.open) {
        if (entry[1].repo === repo && entry[1].storedSqlBytes > 0) {
          victim = entry;
          break;
        }
      }
      if (!victim) return; // its texts are all in streams a request holds now: refused, as nothing can be closed
      need -= victim[1].storedSqlBytes;
      this.drop(victim[0], victim[1], `the server's stored SQL was full (DB_STORED_SQL_MAX_BYTES), its repo stored the most, and it was that repo's least recently used stream`);
    }
  }

  /** `why`: the stream is over (expired, closed to make room), and its transaction rolled back; null: taken for a request. */
  private drop(baton: string, state: StreamState, why: string | null): void {
    if (!this.open.delete(baton)) return;
    const n = (this.perRepo.get(state.repo) ?? 1) - 1;
    if (n <= 0) this.perRepo.delete(state.repo);
    else this.perRepo.set(state.repo, n);
    if (state.idleTimer) clearTimeout(state.idleTimer);
    if (why) {
      state.tx?.abandon(why);
      state.release();
    }
  }

  /** The stream a request names (its baton is spent now), or a new one for a null baton. */
  take(baton: unknown, key: string): StreamState {
    if (baton === null || baton === undefined) return new StreamState(key, this.budget);
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

  /** DB_MAX_TRANSACTIONS is full (TxQuota.makeRoom): `repo`'s least recently used stream holding a transaction is closed. */
  freeTransaction(repo: string, max: number): boolean {
    for (const [baton, s] of this.open) {
      if (s.repo === repo && s.tx !== null) {
        this.drop(baton, s, `the server had DB_MAX_TRANSACTIONS (${max}) interactive transactions open, its repo the most, and it was that repo's least recently used: it was rolled back`);
        return true;
      }
    }
    return false; // all of them are in requests running now
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
      s.release();
    }
    this.open.clear();
    this.perRepo.clear();
  }
}
