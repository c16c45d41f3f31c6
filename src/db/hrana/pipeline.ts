// POST …/_db/[{database}/]v2|v3/pipeline (SPEC 4.10; libSQL's HTTP_V2_SPEC and HRANA_3_SPEC): a stream's requests
// in order, each answered ok or error. Every statement runs as a scopebase read or write request (SPEC 4.3, 4.4):
// same versions, change log, sandbox and limits. A batch that opens a transaction (BEGIN … COMMIT, what
// @libsql/client's batch() and migrate() send) runs as ONE write request: one transaction, one version.
import { ApiError } from '../../shared/errors.ts';
import { turnsForeignKeysOff } from '../executor/foreign-keys.ts';
import { splitStatements, statementSpans } from '../statement-end.ts';
import { type BatchStep, blockAutocommit, checkConditions, evaluate, headOf, READ_ONLY_BEGIN, transactionBlock } from './batch.ts';
import type { LaneHold } from '../executor/pool.ts';
import type { StreamState } from './streams.ts';
import { StreamTx, type TxQuota } from './transaction.ts';
import { batchText } from './result-text.ts';
import { type HranaStmt, onlyResult, RawResult, resultsOf, type StmtResult, toParams } from './values.ts';

export interface Statement { sql: string; params?: unknown[] | Record<string, unknown> }

/** What a pipeline needs of the database service: one SPEC 4.3 read or 4.4 write; a held write lane. */
export interface RunOptions {
  /** The write runs with foreign keys off and checked before COMMIT (a table rebuild). */
  foreignKeysOff?: boolean;
  /** What is left of the pipeline's results allowance. */
  maxResultBytes?: number;
}

export interface HranaBackend {
  /**
   * The executor's reply as text, `{"results":[StmtResult…],"version":n}`. `foreignKeysOff`: the write runs with
   * foreign keys off and checked before COMMIT (a table rebuild).
   */
  run(kind: 'read' | 'write', statements: Statement[], opts?: RunOptions): Promise<string>;
  /** `readOnly`: BEGIN TRANSACTION READONLY, whose statements only read and which holds no lane where it can. */
  holdLane(readOnly: boolean): Promise<LaneHold>;
  /** HRANA_3_SPEC's DescribeResult of one statement, prepared on the database and not run. */
  describe(sql: string): Promise<Record<string, unknown>>;
  transactionMaxMs: number;
  /** SPEC 4.4's limits: steps per batch (DB_MAX_STATEMENTS), and bytes of results per pipeline (DB_MAX_RESULT_BYTES). */
  maxStatements: number;
  maxResultBytes: number;
  /** DB_MAX_BODY_BYTES: the SQL text a pipeline may name by sql_id, in all (what its body could have carried itself). */
  maxBodyBytes: number;
  /** An error that is no ApiError is a bug: answered SQLITE_INTERNAL in the pipeline, and reported here (logged). */
  reportBug(e: unknown): void;
}

interface HranaError { message: string; code: string }

// Every pattern here reads a statement's whole text on the event loop: no two runs of spaces that can trade characters
// (`\s*;?\s*$`, `\s+[^=]*`), which made one of 30 KB take 1–2 s, quadratic in its length (docs/security.md).
/**
 * Statements that only read: tried as a read first (a write among them is refused as read_only, then run as one). A
 * pragma without a value is one (`PRAGMA table_info(t)`: as a write it waited behind an open transaction, then got
 * 503); the foreign-key pragmas are not: a write accepts them with a value in either form, and reads the stream's.
 */
const READ_ONLY = /^\s*(SELECT|VALUES|EXPLAIN|WITH\b(?![\s\S]*\b(INSERT|UPDATE|DELETE|REPLACE)\b))|^\s*PRAGMA(?=\s)(?!\s+(?:"?main"?\s*\.\s*)?"?(?:defer_)?foreign_keys\b)[^=]*$/i;
const TRANSACTION = /^\s*(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b/i;
/** TRANSACTION read in place, at a statement's first word (`lastIndex`). */
const TRANSACTION_AT = /(?:BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE)\b/iy;
/** `PRAGMA foreign_keys` around a migration (what @libsql/client's migrate() sends): the stream's setting, as a connection's. */
const FOREIGN_KEYS_PRAGMA = /^\s*PRAGMA\s+(?:"?main"?\s*\.\s*)?"?foreign_keys"?\s*=\s*(['"]?)(?:on|off|0|1|true|false|yes|no)\1[\s;]*$/i;

const CODES: Record<string, string> = {
  not_allowed: 'SQLITE_AUTH', read_only: 'SQLITE_READONLY', sql_error: 'SQLITE_ERROR', constraint_violation: 'SQLITE_CONSTRAINT',
  query_timeout: 'SQLITE_INTERRUPT', quota_exceeded: 'SQLITE_FULL', result_too_large: 'SQLITE_TOOBIG', payload_too_large: 'SQLITE_TOOBIG', database_not_found: 'SQLITE_CANTOPEN',
};

/** A scopebase error as a Hrana error: `code` is the SQLite code name where SQLite gave one. */
export function hranaError(e: unknown): HranaError {
  if (!(e instanceof ApiError)) return { message: 'internal error', code: 'SQLITE_INTERNAL' };
  if (e.code === 'not_allowed') return { message: e.message, code: 'SQLITE_AUTH' }; // every sandbox refusal alike, whatever SQLite said
  const sqlite = (e.details as { sqliteCode?: unknown } | undefined)?.sqliteCode;
  return { message: e.message, code: typeof sqlite === 'string' ? sqlite : CODES[e.code] ?? e.code.toUpperCase() };
}

function tooManySteps(max: number, got: number): ApiError {
  return new ApiError('payload_too_large', `a batch holds at most ${max} steps (DB_MAX_STATEMENTS), got ${got}`);
}

/** A write in a read-only transaction: SQLite's own words for it (SQLITE_READONLY), and its statement. */
function readOnlyTransaction(e: ApiError): ApiError {
  return new ApiError('read_only', 'attempt to write in a read-only transaction (BEGIN TRANSACTION READONLY): nothing was written', e.details);
}

const EMPTY: StmtResult = { cols: [], rows: [], affected_row_count: 0, last_insert_rowid: null, rows_read: 0, rows_written: 0, query_duration_ms: 0 };

export class Pipeline {
  private readonly backend: HranaBackend;
  private readonly stream: StreamState;
  private readonly quota: TxQuota;
  /** What is left of the pipeline's results allowance (DB_MAX_RESULT_BYTES, across its requests, as /_db/query's). */
  private resultBytesLeft: number;
  /**
   * Characters of stored SQL its requests may still read by sql_id (DB_MAX_BODY_BYTES in all): each read scans it on
   * this event loop, so 10,000 `sequence` requests naming one 2 MB text held every org's requests for over 5 minutes.
   */
  private storedCharsLeft: number;
  /** When this pipeline last gave the event loop back (`giveTurn`). */
  private turn = performance.now();

  constructor(backend: HranaBackend, stream: StreamState, quota: TxQuota) {
    this.backend = backend;
    this.stream = stream;
    this.quota = quota;
    this.resultBytesLeft = backend.maxResultBytes;
    this.storedCharsLeft = backend.maxBodyBytes;
  }

  /** Runs every request in order (each one's failure is its own): each result as JSON text, and whether the stream closed. */
  async run(requests: unknown[]): Promise<{ results: string[]; closed: boolean }> {
    const results: string[] = [];
    let closed = false;
    for (const [i, r] of requests.entries()) {
      await this.giveTurn();
      if (closed) {
        results.push(JSON.stringify({ type: 'error', error: { message: 'the stream is closed', code: 'STREAM_CLOSED' } }));
        continue;
      }
      try {
        const response = await this.request(r, `requests[${i}]`);
        if (response.type === 'close') closed = true;
        // A result the executor rendered goes out as it came (the hot path of every @libsql/client execute).
        if (typeof response.text === 'string') results.push(response.text); // a batch's answer, made as text
        else results.push(response.result instanceof RawResult ? `{"type":"ok","response":{"type":"execute","result":${response.result.text}}}` : JSON.stringify({ type: 'ok', response }));
      } catch (e) {
        results.push(JSON.stringify({ type: 'error', error: this.failure(e) }));
      }
    }
    return { results, closed };
  }

  private async request(r: unknown, where: string): Promise<Record<string, unknown>> {
    const req = (typeof r === 'object' && r !== null ? r : {}) as Record<string, unknown>;
    switch (req.type) {
      case 'close':
        this.stream.tx?.abandon('its stream was closed');
        this.stream.tx = null;
        return { type: 'close' };
      case 'execute': return { type: 'execute', result: await this.execute(req.stmt as HranaStmt, `${where}.stmt`) };
      case 'batch': return { type: 'batch', text: await this.batch(req.batch as { steps?: unknown }, `${where}.batch`) };
      case 'sequence':
        await this.sequence(this.sqlOf(req as HranaStmt, where), where);
        return { type: 'sequence' };
      case 'describe': {
        const sql = this.sqlOf(req as HranaStmt, where);
        this.checkAllowance();
        const result = this.stream.tx ? await this.stream.tx.describe(sql) : await this.backend.describe(sql);
        // Its columns are named after the statement's text: a stored text described by sql_id over and over grew the reply without bound.
        this.resultBytesLeft -= Buffer.byteLength(JSON.stringify(result));
        return { type: 'describe', result };
      }
      case 'store_sql':
        if (typeof req.sql_id !== 'number' || typeof req.sql !== 'string') throw new ApiError('invalid_request', `${where}: store_sql takes "sql_id" (a number) and "sql"`);
        this.stream.storeSql(req.sql_id, req.sql);
        return { type: 'store_sql' };
      case 'close_sql':
        this.stream.closeSql(req.sql_id as number);
        return { type: 'close_sql' };
      case 'get_autocommit': return { type: 'get_autocommit', is_autocommit: this.stream.tx === null };
      default:
        throw new ApiError('invalid_request', `${where}: unknown request type ${JSON.stringify(String(req.type).slice(0, 40))}; this server takes close, execute, batch, sequence, describe, store_sql, close_sql and get_autocommit`);
    }
  }

  /** executeMultiple's text: one write request, or statement by statement on the stream where a transaction is open or begins. */
  private async sequence(text: string, where: string): Promise<void> {
    // Read in place first: 3 million statements were each copied (and looked through) before they were refused.
    let count = 0;
    let control = false;
    for (const s of statementSpans(text)) {
      count++;
      TRANSACTION_AT.lastIndex = s.start;
      control ||= TRANSACTION_AT.test(text);
    }
    if (count === 0) return;
    // As a request of its own, it would wait behind the stream's own transaction (and commit apart from it).
    if (this.stream.tx || control) {
      for (const s of statementSpans(text)) {
        await this.giveTurn();
        await this.execute({ sql: text.slice(s.at, s.end).trim() }, where);
      }
      return;
    }
    if (count > this.backend.maxStatements) {
      throw new ApiError('payload_too_large', `${where}: a sequence outside a transaction runs as one write of at most ${this.backend.maxStatements} statements (DB_MAX_STATEMENTS), got ${count}; nothing of it ran`);
    }
    const { statements, rest } = splitStatements(text);
    await this.runAs('write', (rest ? [...statements, rest] : statements).map((sql) => ({ sql }))); // with the stream's PRAGMA foreign_keys, as its other writes
  }

  /** The statement's text; a stored one is charged each time it is read (a batch reads its steps twice). */
  private sqlOf(stmt: HranaStmt, where: string): string {
    if (stmt?.sql !== undefined && stmt?.sql !== null && stmt?.sql_id !== undefined && stmt?.sql_id !== null) throw new ApiError('invalid_request', `${where}: a statement has "sql" or "sql_id", not both`);
    if (typeof stmt?.sql === 'string') return stmt.sql;
    if (typeof stmt?.sql_id === 'number') {
      const sql = this.stream.sql(stmt.sql_id);
      if (sql === undefined) throw new ApiError('invalid_request', `${where}: no SQL is stored as sql_id ${stmt.sql_id}`);
      if (sql.length > this.storedCharsLeft) {
        throw new ApiError('payload_too_large', `${where}: this pipeline's statements named by sql_id come to more than DB_MAX_BODY_BYTES (${this.backend.maxBodyBytes}) characters of SQL text, what its body could carry itself; this statement did not run: send the rest in another pipeline`);
      }
      this.storedCharsLeft -= sql.length;
      return sql;
    }
    throw new ApiError('invalid_request', `${where}: a statement needs "sql" or "sql_id"`);
  }

  private statement(stmt: HranaStmt, where: string): Statement {
    if (typeof stmt !== 'object' || stmt === null) throw new ApiError('invalid_request', `${where} must be a statement object`);
    const params = toParams(stmt, where);
    return params === undefined ? { sql: this.sqlOf(stmt, where) } : { sql: this.sqlOf(stmt, where), params };
  }

  /** One statement on its own (autocommit); its result stays the executor's text where it can. */
  private async execute(stmt: HranaStmt, where: string): Promise<StmtResult | RawResult> {
    const s = this.statement(stmt, where);
    const head = headOf(s.sql);
    if (FOREIGN_KEYS_PRAGMA.test(head)) {
      if (!this.stream.tx) this.stream.foreignKeysOff = turnsForeignKeysOff(head); // inside a transaction SQLite ignores it
      return EMPTY;
    }
    if (TRANSACTION.test(head)) return this.control(head, s);
    const tx = this.stream.tx;
    if (tx) {
      this.checkAllowance();
      // SQLite rolled it back under this statement: the stream is in autocommit again, as a connection is.
      const { result, bytes } = await tx.exec(s, this.resultBytesLeft, stmt.want_rows).catch((e: unknown) => {
        if (tx.sqliteEnded && this.stream.tx === tx) this.stream.tx = null;
        throw e;
      });
      this.resultBytesLeft -= bytes; // the executor's reply in bytes, as runAs charges its own
      return result;
    }
    const reply = await this.runAs(READ_ONLY.test(head) ? 'read' : 'write', [s]);
    return (stmt.want_rows !== false ? onlyResult(reply) : null) ?? resultsOf(reply, [stmt])[0]!;
  }

  /** BEGIN, COMMIT and ROLLBACK of an interactive transaction; savepoints inside one (nested ORM transactions). */
  private async control(sql: string, s?: Statement): Promise<StmtResult> {
    const tx = this.stream.tx;
    if (/^\s*BEGIN\b/i.test(sql)) {
      if (tx) throw new ApiError('sql_error', 'cannot start a transaction within a transaction');
      const giveBack = this.quota.take(this.stream.repo);
      try {
        const readOnly = READ_ONLY_BEGIN.test(sql);
        this.stream.tx = await StreamTx.begin(await this.backend.holdLane(readOnly), this.backend.transactionMaxMs, { foreignKeysOff: this.stream.foreignKeysOff, readOnly }, giveBack);
      } catch (e) {
        giveBack();
        throw e;
      }
    } else if (/^\s*(COMMIT|END)\b/i.test(sql)) {
      if (!tx) throw new ApiError('sql_error', 'cannot commit - no transaction is active');
      try {
        await tx.commit();
      } finally {
        if (tx.over) this.stream.tx = null; // a failed COMMIT may leave it open, as SQLite does
      }
    } else if (/^\s*ROLLBACK(?:\s+TRANSACTION)?[\s;]*$/i.test(sql)) {
      if (!tx) throw new ApiError('sql_error', 'cannot rollback - no transaction is active');
      this.stream.tx = null;
      await tx.rollback().catch(() => undefined); // an ended transaction has nothing left to undo
    } else {
      // SAVEPOINT, RELEASE, ROLLBACK TO: statements of the open transaction, run on its connection.
      if (!tx || !s) throw new ApiError('sql_error', `${/^\s*(\S*)/.exec(sql)![1]!.toUpperCase()} only inside a transaction: BEGIN first (a request outside one is its own transaction)`);
      await tx.exec(s);
    }
    return EMPTY;
  }

  /** Reads that turn out to write run as a write (which creates a database that does not exist yet, if it changes it). */
  /** `read only`: a read that must stay one (a read-only transaction's block): a write in it is refused, not run. */
  private async runAs(kind: 'read' | 'read only' | 'write', statements: Statement[], foreignKeysOff = this.stream.foreignKeysOff): Promise<string> {
    this.checkAllowance();
    const reply = await this.runOnce(kind, statements, foreignKeysOff);
    this.resultBytesLeft -= Buffer.byteLength(reply);
    return reply;
  }

  /**
   * Requests and statements answered without I/O (an error, a PRAGMA foreign_keys) never give the event loop back:
   * other orgs' requests get a turn every 20 ms (a sequence of 1.3 million such statements held them 3 s).
   */
  private async giveTurn(): Promise<void> {
    if (performance.now() - this.turn <= 20) return;
    await new Promise(setImmediate);
    this.turn = performance.now();
  }

  /** A request's or a step's error as the protocol's; one that is no ApiError is a bug, and reported. */
  private failure(e: unknown): HranaError {
    if (!(e instanceof ApiError)) this.backend.reportBug(e);
    return hranaError(e);
  }

  /** Every result of the pipeline, a batch's steps included, draws on one allowance, as a /_db/query batch's do. */
  private checkAllowance(): void {
    if (this.resultBytesLeft <= 0) throw new ApiError('result_too_large', `this pipeline's results are over DB_MAX_RESULT_BYTES (${this.backend.maxResultBytes} bytes); this statement did not run: send the rest in another request`);
  }

  private async runOnce(kind: 'read' | 'read only' | 'write', statements: Statement[], foreignKeysOff: boolean): Promise<string> {
    try {
      return await this.backend.run(kind === 'read only' ? 'read' : kind, statements, { foreignKeysOff, maxResultBytes: this.resultBytesLeft });
    } catch (e) {
      if (kind === 'read only' && e instanceof ApiError && e.code === 'read_only') throw readOnlyTransaction(e);
      // A read that turns out to write runs as a write. (A database that does not exist reads as an empty one, as on
      // Turso: see pipeline-backend.ts.)
      if (kind === 'read' && e instanceof ApiError && e.code === 'read_only') return this.backend.run('write', statements, { foreignKeysOff, maxResultBytes: this.resultBytesLeft });
      throw e;
    }
  }

  /** The pipeline's ok answer to the batch, as text: its steps' results are passed on as the executor wrote them. */
  private async batch(batch: { steps?: unknown }, where: string): Promise<string> {
    if (!Array.isArray(batch?.steps)) throw new ApiError('invalid_request', `${where}.steps must be an array`);
    const steps = batch.steps as BatchStep[];
    checkConditions(steps);
    if (steps.length > 2 * this.backend.maxStatements + 8) throw tooManySteps(this.backend.maxStatements, steps.length);
    const sqls = steps.map((s, i) => this.sqlOf(s?.stmt, `${where}.steps[${i}].stmt`));
    // A client's BEGIN, COMMIT, ROLLBACK and foreign_keys pragmas around a batch are not its statements (SPEC 4.2).
    const heads = sqls.map(headOf);
    const counted = heads.filter((sql) => !TRANSACTION.test(sql) && !FOREIGN_KEYS_PRAGMA.test(sql)).length;
    if (counted > this.backend.maxStatements) throw tooManySteps(this.backend.maxStatements, counted);
    const block = transactionBlock(heads, steps, TRANSACTION);
    if (block && this.stream.tx) throw new ApiError('sql_error', 'cannot start a transaction within a transaction');
    const results: (StmtResult | RawResult | null)[] = steps.map(() => null);
    const errors: (HranaError | null)[] = steps.map(() => null);
    // The statements between BEGIN and COMMIT, run as one request ahead of the evaluation that reports them.
    const inBlock = new Map<number, { result?: StmtResult | RawResult; error?: HranaError }>();
    if (block) {
      const indexes = Array.from({ length: block.commit - block.begin - 1 }, (_, k) => block.begin + 1 + k);
      try {
        const statements = indexes.map((i) => this.statement(steps[i]!.stmt, `${where}.steps[${i}].stmt`));
        // Steps before BEGIN run later, in the evaluation: a `PRAGMA foreign_keys=OFF` among them (migrate()) holds here already.
        const off = this.stream.foreignKeysOff || sqls.slice(0, block.begin).some(turnsForeignKeysOff);
        const replies = statements.length ? resultsOf(await this.runAs(block.readOnly ? 'read only' : 'write', statements, off), indexes.map((i) => steps[i]!.stmt)) : [];
        indexes.forEach((i, k) => inBlock.set(i, { result: replies[k]! }));
      } catch (e) {
        // The statements before the failing one ran (then rolled back with it): ok, without rows, as sqld reports them.
        const failed = Math.min(e instanceof ApiError ? (e.details as { statement?: number } | undefined)?.statement ?? 0 : 0, indexes.length - 1);
        indexes.forEach((i, k) => {
          if (k < failed) inBlock.set(i, { result: EMPTY });
          else if (k === failed) inBlock.set(i, { error: this.failure(e) });
        });
      }
    }
    await evaluate(steps, block ? blockAutocommit(block) : () => this.stream.tx === null, async (i) => {
      if (block && i > block.begin && i < block.commit) {
        const outcome = inBlock.get(i);
        if (outcome?.error) errors[i] = outcome.error;
        else if (outcome?.result) results[i] = outcome.result;
        return outcome?.result ? 'ok' : outcome?.error ? 'error' : 'skipped';
      }
      if (block && (i === block.begin || i === block.commit || i === block.rollback)) {
        results[i] = EMPTY; // the block ran as one request: its BEGIN, COMMIT or ROLLBACK is that request's
        return 'ok';
      }
      try {
        results[i] = await this.execute(steps[i]!.stmt, `${where}.steps[${i}].stmt`);
        return 'ok';
      } catch (e) {
        errors[i] = this.failure(e);
        return 'error';
      }
    });
    return batchText(results.map((r) => (r === null ? 'null' : r instanceof RawResult ? r.text : JSON.stringify(r))), errors);
  }
}
