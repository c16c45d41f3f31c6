// Executor-side interactive transactions (Hrana streams, SPEC 4.10): BEGIN in one message, statements in later
// ones, COMMIT or ROLLBACK last. The pool holds the database's write lane and sends every message of a transaction
// to this one process; the transaction has a connection of its own, so this process's other requests for the same
// database never see it, or run inside it. On COMMIT it is recorded like an execute: one version, one event.
import type { DbHandle, ExecutorLimits, Prepared } from './handles.ts';
import { DbHandle as Handle, EMPTY } from './handles.ts';
import { existsSync } from 'node:fs';
import { errorReply, failure, type Reply } from './reply.ts';
import { ResultBudget, runRead, runWrite, type StatementSpec } from './statements.ts';
import { describe } from './read-ops.ts';
import { changedNothing, type GroupContext, prune, recordChange, totals } from './write-ops.ts';
import { MENTIONS } from './alter-column.ts';
import { NO_ROWS_REPLY_MAX_BYTES } from './hrana-result.ts';
import { keepHistory } from './history-ops.ts';
import { KeyWatch } from './key-cover.ts';
import { deferForeignKeys, endDeferral } from './foreign-keys.ts';
import { ApiError } from '../../shared/errors.ts';
import { isSqliteError, mapSqliteError } from '../sqlite-errors.ts';
import { headOf } from '../hrana/batch.ts';

interface Tx {
  h: DbHandle;
  ctx: GroupContext;
  session: ReturnType<DbHandle['db']['createSession']>;
  /** Tables whose key may hold NULL: whether the session shows their rows (key-cover.ts). */
  watch: KeyWatch;
  before: { changes: number; schema: number };
  tables: Set<string>;
  /** A statement wrote rows no changeset shows (Sandbox.untracked). */
  untracked: boolean;
  /** `BEGIN TRANSACTION READONLY`: a read snapshot, its statements run as reads (a write is read_only), no lane held. */
  readOnly: boolean;
}

const open = new Map<string, Tx>();

const gone = (): Reply => errorReply({ code: 'invalid_request', message: 'this transaction is no longer open in its executor' });

export interface BeginOptions {
  /** The stream turned foreign keys off before BEGIN, so they are off for the whole transaction (foreign-keys.ts). */
  foreignKeysOff?: boolean;
  readOnly?: boolean;
}

export function beginTx(id: string, path: string, create: boolean, ctx: GroupContext, limits: ExecutorLimits, { foreignKeysOff = false, readOnly = false }: BeginOptions = {}): Reply {
  if (open.has(id)) return errorReply({ code: 'invalid_request', message: 'this transaction is already open' });
  let h: DbHandle;
  try {
    // A read-only transaction of a database not made yet reads an empty one, as its plain reads do: no file is made.
    h = readOnly && !create && !existsSync(path) ? new Handle(EMPTY, true, limits) : new Handle(path, create, limits);
  } catch (e) {
    return failure(e, null);
  }
  try {
    if (foreignKeysOff) h.internal('PRAGMA foreign_keys = OFF').run(); // this connection is the transaction's alone
    h.internal(readOnly ? 'BEGIN' : 'BEGIN IMMEDIATE').run();
    if (readOnly) h.internal('SELECT count(*) FROM sqlite_schema').get(); // the snapshot starts now, at BEGIN, as on a connection
    if (foreignKeysOff) deferForeignKeys(h); // every key is checked at COMMIT
    h.sandbox.allowSavepoints = true; // nested transactions of ORMs; COMMIT and ROLLBACK stay the stream's
    open.set(id, { h, ctx, session: h.db.createSession(), watch: new KeyWatch(h), before: totals(h), tables: new Set(), untracked: false, readOnly });
    return { status: 200, body: '{}' };
  } catch (e) {
    h.close();
    return failure(e, null);
  }
}

/**
 * One statement in the transaction. One that SQLite fails is left as SQLite leaves it (undone by its statement journal;
 * OR FAIL keeps the rows before the failing one); one we refuse after it ran (its result over the limit, a schema the
 * sandbox refuses, ALTER COLUMN's rows check) is undone by a savepoint of its own, as a refused /_db/execute leaves
 * nothing.
 */
/** `maxResultBytes` in the message: what is left of its pipeline's allowance (set by the service, never by a client). */
/** `describe` (set by the service, never by a client): that statement prepared on the transaction's connection, not run. */
export function execTx(id: string, statement: StatementSpec & { maxResultBytes?: number; describe?: string }, maxResultBytes: number): Reply & { ended?: true } {
  const tx = open.get(id);
  if (!tx) return gone();
  const { h } = tx;
  if (typeof statement.describe === 'string') return describe(h, statement.describe);
  let guard: Guard | null = null;
  let ran: Prepared | null = null;
  const savepoint = () => {
    const changes = totalChanges(h);
    h.internal(`SAVEPOINT ${STATEMENT}`).run();
    guard = { changes };
  };
  try {
    const budget = new ResultBudget(maxResultBytes, statement.maxResultBytes);
    // The reply measured whole, as /_db/execute's is (ResultBudget.check): rows alone left ~200 bytes uncounted.
    if (tx.readOnly) return { status: 200, body: budget.check(`{"results":[${runRead(h, statement, 0, 'hrana', budget)}]}`) };
    if (MENTIONS.test(statement.sql)) savepoint(); // ALTER COLUMN runs (and checks the rows) before anything is prepared
    const out = runWrite(h, statement, 0, 'hrana', budget, tx.watch, (p) => {
      ran = p;
      if (!guard && refusable(p, budget) && !NESTING.test(headOf(statement.sql))) savepoint();
    });
    const body = budget.check(`{"results":[${out.text}]}`);
    if (guard) h.internal(`RELEASE ${STATEMENT}`).run();
    wrote(tx, out.tables, out.untracked === true);
    return { status: 200, body };
  } catch (e) {
    const denied = h.sandbox.denied; // read first: the internal statements below clear it
    // SQLite rolled it all back (INSERT OR ROLLBACK, a full disk), or the statement's savepoint could not be ended.
    if (!h.db.isTransaction || !settled(tx, e, guard, ran)) return endedBySqlite(id, tx, failure(e, denied, 0, { transactionEnded: true }));
    if (tx.readOnly && denied?.code === 'read_only') return failure(e, { code: 'read_only', message: 'attempt to write in a read-only transaction (BEGIN TRANSACTION READONLY): nothing was written' }, 0);
    return failure(e, denied, 0);
  }
}

/** SAVEPOINT, RELEASE, ROLLBACK TO: the client's own nesting, which a savepoint of ours around it would release with it. */
const NESTING = /^(SAVEPOINT|RELEASE|ROLLBACK)\b/i;
const STATEMENT = '_scopebase_statement';

/** A statement run in a savepoint of its own, and the transaction's count of changed rows before it. */
interface Guard { changes: number }

const totalChanges = (h: DbHandle): number => Number(h.internal('SELECT total_changes() AS n').get()!.n);

/**
 * Whether we may refuse the statement after SQLite ran it and it wrote, so that it runs in a savepoint of its own: a
 * write returning rows, a schema to check, or an allowance too small for a reply without rows. Others run without one
 * (a SELECT writes nothing): a savepoint costs a few µs, and makes an FTS5 table write out its pending terms.
 */
const refusable = (p: Prepared, budget: ResultBudget): boolean =>
  (p.returnsRows && (p.written.length > 0 || p.untracked)) || p.checksSchema || !budget.holds(NO_ROWS_REPLY_MAX_BYTES);

/** What a statement that changed rows wrote: judged at COMMIT (changedNothing) and named in the event. */
function wrote(tx: Tx, tables: Iterable<string>, untracked: boolean): void {
  for (const t of tables) tx.tables.add(t);
  tx.untracked ||= untracked;
}

/**
 * After a failed statement: our refusal of one that ran is rolled back (its rows leave the transaction's count too);
 * SQLite's own failure is left as SQLite left it (it undid what it had to; rows OR FAIL kept, which changes() counts,
 * are the transaction's, and their tables are judged at COMMIT). False when that failed (an I/O error): the
 * transaction is ended.
 */
function settled(tx: Tx, e: unknown, guard: Guard | null, ran: Prepared | null): boolean {
  const { h } = tx;
  try {
    if (guard && !isSqliteError(e)) {
      h.internal(`ROLLBACK TO ${STATEMENT}`).run();
      tx.before.changes += totalChanges(h) - guard.changes;
    } else if (ran?.dml && Number(h.internal('SELECT changes() AS n').get()!.n) > 0) {
      wrote(tx, ran.written, ran.untracked);
    }
    if (guard) h.internal(`RELEASE ${STATEMENT}`).run();
    return true;
  } catch {
    try {
      if (h.db.isTransaction) h.internal('ROLLBACK').run();
    } catch {
      // the connection is closed with the transaction (end)
    }
    return false;
  }
}

/**
 * SQLite rolled the whole transaction back itself (INSERT OR ROLLBACK, RAISE(ROLLBACK) in a trigger, a full disk):
 * it is over here too, or the stream's next statements would commit one by one on this connection, outside any
 * version and the change log.
 */
function endedBySqlite(id: string, tx: Tx, reply: Reply): Reply & { ended: true } {
  end(id, tx);
  return { ...reply, ended: true };
}

/**
 * Records and commits the transaction. A COMMIT that fails while SQLite keeps the transaction (a deferred foreign key
 * still broken) leaves it open, as SQLite and libsql-server do: its bookkeeping is undone, and the client may fix the
 * rows and COMMIT again, or ROLLBACK. `committed`: called the moment COMMIT succeeded.
 */
export function commitTx(id: string, committed?: () => void): Reply {
  const tx = open.get(id);
  if (!tx) return gone();
  const { h, ctx } = tx;
  const deferring = h.deferringForeignKeys;
  let recording = false;
  try {
    endDeferral(h, true);
    let version = h.version();
    const after = totals(h);
    const touched = after.changes !== tx.before.changes;
    if (after.schema !== tx.before.schema || (touched && !changedNothing(h, tx.session, tx.tables, tx.untracked, tx.watch))) {
      version++;
      h.internal('SAVEPOINT _scopebase_commit').run(); // what is recorded here is undone if COMMIT fails
      recording = true;
      recordChange(h, ctx, tx.session, version, {
        type: 'database.changed', operation: 'execute',
        changes: { rowsAffected: after.changes - tx.before.changes, tables: [...tx.tables].sort() }, schemaChanged: after.schema !== tx.before.schema,
      }, tx.watch, true);
      prune(h, ctx, version);
      h.internal("INSERT OR REPLACE INTO _scopebase_meta (key, value) VALUES ('group', ?)").run(ctx.token);
      h.internal('COMMIT').run();
      committed?.();
      keepHistory(h, version - 1, version);
      end(id, tx);
      return { status: 200, body: `{"version":${version}}`, version };
    }
    h.internal(touched ? 'ROLLBACK' : 'COMMIT').run(); // it changed nothing: undone, so no counter it moved stays moved
    end(id, tx);
    return { status: 200, body: `{"version":${version}}` };
  } catch (e) {
    if (brokenForeignKey(e) && keptOpen(h, recording, deferring)) return failure(stillOpen(e), null, undefined, { transactionOpen: true });
    try {
      if (h.db.isTransaction) h.internal('ROLLBACK').run();
    } finally {
      end(id, tx); // a ROLLBACK that throws must not leave the connection, and its write lock, behind
    }
    return failure(e, null);
  }
}

/**
 * Whether a COMMIT failed on a foreign key still broken (our check of deferred keys, or SQLite's own): the one failure
 * the client can mend and COMMIT again. Any other (a full disk while recording) rolls the transaction back.
 */
function brokenForeignKey(e: unknown): boolean {
  if (e instanceof ApiError) return (e.details as { sqliteCode?: string } | undefined)?.sqliteCode === 'SQLITE_CONSTRAINT_FOREIGNKEY';
  return (e as { errcode?: number }).errcode === 787; // SQLITE_CONSTRAINT_FOREIGNKEY
}

/** The transaction is over: its connection and session go. */
function end(id: string, tx: Tx): void {
  open.delete(id);
  try {
    tx.session.close();
  } catch {
    // closed already
  }
  tx.h.close();
}

/** After a failed COMMIT: true when SQLite kept the transaction, now as it was before COMMIT (bookkeeping undone, keys deferred again). */
function keptOpen(h: DbHandle, recording: boolean, deferring: boolean): boolean {
  if (!h.db.isTransaction) return false; // a full disk or an I/O error rolled it back
  try {
    if (recording) {
      h.internal('ROLLBACK TO _scopebase_commit').run();
      h.internal('RELEASE _scopebase_commit').run();
    }
    if (deferring) deferForeignKeys(h);
    return true;
  } catch {
    return false; // it cannot be put back as it was: it ends
  }
}

/** The failure of a COMMIT that left the transaction open, saying so (SQLite's own message alone reads as final). */
function stillOpen(e: unknown): unknown {
  const hint = 'the transaction is still open: fix the rows and COMMIT again, or ROLLBACK';
  if (e instanceof ApiError) return new ApiError(e.code, `${e.message}; ${hint}`, e.details);
  const mapped = mapSqliteError(e, null);
  return new ApiError(mapped.code, `${mapped.message}; ${hint}`, mapped.details);
}

/** Whether the transaction `id` is open here (a COMMIT that failed may leave it open). */
export const isOpen = (id: string): boolean => open.has(id);

export function rollbackTx(id: string): Reply {
  const tx = open.get(id);
  if (!tx) return gone();
  try {
    if (tx.h.db.isTransaction) tx.h.internal('ROLLBACK').run();
  } finally {
    end(id, tx);
  }
  return { status: 200, body: '{}' };
}
