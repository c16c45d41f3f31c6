// An interactive transaction of a Hrana stream: BEGIN holds the database's write lane (later writes to it wait,
// bounded by DB_QUEUE_TIMEOUT_MS) and opens a transaction on one executor process; COMMIT records it as one
// version; ROLLBACK, an idle stream (DB_STREAM_IDLE_MS) or DB_TRANSACTION_MAX_MS ends it and lets the writes go.
import { randomBytes } from 'node:crypto';
import { ApiError } from '../../shared/errors.ts';
import { replyError } from '../pipeline-backend.ts';
import type { LaneHold } from '../executor/pool.ts';
import { type RawResult, resultsOf, type StmtResult } from './values.ts';
import type { Statement } from './pipeline.ts';

/** Interactive transactions open at once per repo (DB_MAX_TRANSACTIONS bounds them in all). */
export const MAX_TRANSACTIONS_PER_REPO = 32;

/**
 * Interactive transactions open at once: each holds its database's write lane and a connection of its own in an
 * executor process, so they are bounded per repo and in all; past either, BEGIN gets 503 with Retry-After. When
 * all are taken, a repo holding fewer than the busiest one gets the place of the busiest one's least recently used
 * idle transaction (rolled back, its stream closed), as DB_MAX_STREAMS does: a few repos, or one org's many, at
 * their own cap cannot keep every other repo's clients from opening one.
 */
export class TxQuota {
  private readonly perRepo = new Map<string, number>();
  private all = 0;
  private readonly max: number;
  /** Rolls back `repo`'s least recently used idle transaction and closes its stream; false if it has none idle. */
  makeRoom: ((repo: string) => boolean) | null = null;

  constructor(max: number) {
    this.max = max;
  }

  /** A place for one more transaction of `repo`; the function returned gives it back (once, however often called). */
  take(repo: string): () => void {
    const mine = this.perRepo.get(repo) ?? 0;
    if (this.all >= this.max && mine < MAX_TRANSACTIONS_PER_REPO) {
      let busiest: string | undefined;
      for (const [r, n] of this.perRepo) if (busiest === undefined || n > this.perRepo.get(busiest)!) busiest = r;
      if (busiest !== undefined && busiest !== repo && this.perRepo.get(busiest)! > mine + 1) this.makeRoom?.(busiest);
    }
    const full = mine >= MAX_TRANSACTIONS_PER_REPO ? `this repo has ${MAX_TRANSACTIONS_PER_REPO} interactive transactions open` : this.all >= this.max ? `the server has DB_MAX_TRANSACTIONS (${this.max}) interactive transactions open` : null;
    if (full) throw new ApiError('unavailable', `${full}; commit or roll one back, or retry`, { committed: false }, { 'retry-after': '1' });
    this.perRepo.set(repo, mine + 1);
    this.all++;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.all--;
      const n = (this.perRepo.get(repo) ?? 1) - 1;
      if (n <= 0) this.perRepo.delete(repo);
      else this.perRepo.set(repo, n);
    };
  }
}

export class StreamTx {
  private readonly hold: LaneHold;
  private readonly giveBack: () => void;
  private readonly id = randomBytes(12).toString('base64url');
  private readonly timer: NodeJS.Timeout;
  private ended: string | null = null;
  /** SQLite rolled it back under a failing statement (INSERT OR ROLLBACK, RAISE(ROLLBACK), a full disk). */
  sqliteEnded = false;

  private constructor(hold: LaneHold, maxMs: number, giveBack: () => void) {
    this.hold = hold;
    this.giveBack = giveBack;
    this.timer = setTimeout(() => this.abandon(`it was open longer than ${maxMs} ms (DB_TRANSACTION_MAX_MS) and was rolled back`), maxMs).unref();
  }

  /** `foreignKeysOff`: the stream ran `PRAGMA foreign_keys = OFF` first; `readOnly`: BEGIN TRANSACTION READONLY. */
  static async begin(hold: LaneHold, maxMs: number, options: { foreignKeysOff: boolean; readOnly: boolean }, giveBack: () => void): Promise<StreamTx> {
    const tx = new StreamTx(hold, maxMs, giveBack);
    try {
      await tx.send('tx.begin', Buffer.from(JSON.stringify(options)));
    } catch (e) {
      tx.finish('it could not begin');
      throw e;
    }
    return tx;
  }

  /**
   * Runs one statement in the transaction; resolves its StmtResult and the bytes of the executor's reply holding it
   * (what the pipeline's allowance is charged, as for its other requests).
   */
  /** `maxResultBytes`: what is left of the pipeline's results allowance. */
  /** A statement after which SQLite had rolled the whole transaction back ends it: `sqliteEnded` then says so. */
  /** `wantRows`: false drops the rows from the result (HRANA's `want_rows`). */
  async exec(statement: Statement, maxResultBytes?: number, wantRows?: boolean): Promise<{ result: StmtResult | RawResult; bytes: number }> {
    try {
      const { reply, bytes } = await this.send('tx.exec', Buffer.from(JSON.stringify(maxResultBytes === undefined ? statement : { ...statement, maxResultBytes })));
      return { result: resultsOf(reply, [{ want_rows: wantRows }])[0]!, bytes }; // as the executor rendered it (hrana-result.ts), unparsed
    } catch (e) {
      if ((e as ApiError).details?.transactionEnded === true) {
        this.sqliteEnded = true;
        this.finish('SQLite rolled it back when a statement failed');
      }
      throw e;
    }
  }

  /** HRANA_3_SPEC's DescribeResult of one statement, prepared on the transaction's connection (it sees its schema). */
  async describe(sql: string): Promise<Record<string, unknown>> {
    return JSON.parse((await this.send('tx.exec', Buffer.from(JSON.stringify({ sql: '', describe: sql })))).reply) as Record<string, unknown>;
  }

  /** A COMMIT that failed with the transaction kept open (a deferred foreign key, as in SQLite) leaves it open here too. */
  async commit(): Promise<void> {
    try {
      await this.send('tx.commit');
    } catch (e) {
      if (!(e instanceof ApiError && (e.details as { transactionOpen?: unknown } | undefined)?.transactionOpen === true)) this.finish('its COMMIT failed');
      throw e;
    }
    this.finish('it was committed');
  }

  /** It ended (committed, rolled back, abandoned, or lost with its executor). */
  get over(): boolean {
    return this.ended !== null;
  }

  async rollback(): Promise<void> {
    try {
      await this.send('tx.rollback');
    } finally {
      this.finish('it was rolled back');
    }
  }

  /** Ends it without waiting (a stream closed, expired or the service stopping): rolled back, the lane let go. */
  abandon(why: string): void {
    if (this.ended) return;
    this.giveBack(); // its place goes now (TxQuota.makeRoom); the lane, once the rollback ran
    void this.hold.run({ op: 'tx.rollback', tx: this.id }).catch(() => undefined).finally(() => this.finish(why));
    this.ended = why;
  }

  private finish(why: string): void {
    clearTimeout(this.timer);
    this.ended ??= why;
    this.giveBack();
    try {
      this.hold.release();
    } catch {
      // releasing runs the quota's bookkeeping; it is called from timers too, where a throw would stop the server
    }
  }

  /** The executor's reply as text (an error reply: thrown, parsed), and its size in bytes. */
  private async send(op: string, body?: Buffer): Promise<{ reply: string; bytes: number }> {
    if (this.ended) throw new ApiError('invalid_request', `the transaction is over: ${this.ended}`);
    let res;
    try {
      res = await this.hold.run({ op, tx: this.id }, body);
    } catch (e) {
      this.finish('its executor stopped'); // the connection holding it is gone: nothing of it remains
      throw e;
    }
    if (res.status !== 200) throw replyError(res.body);
    return { reply: res.body.toString('utf8'), bytes: res.body.length };
  }
}
