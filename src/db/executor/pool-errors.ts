// What the pool answers when a request could not run, or lost its executor: SPEC 3's errors, saying what of it ran.
import { ApiError } from '../../shared/errors.ts';
import { LostError, type ExecutorProcess } from './process.ts';
import { QueueError } from './queue-limits.ts';
import { sizeText } from './temp-space.ts';

/** A database file's folder is its repo's (`…/db/{org}/{repo}/{database}.sqlite`): the repo is the tenant. */
export function tenantOfPath(path: unknown): string {
  const p = String(path);
  return p.slice(0, p.lastIndexOf('/'));
}

export function overloaded(why: string): ApiError {
  return new ApiError('unavailable', `the database service is overloaded: ${why}; nothing of this request ran, retry after a second`, { committed: false }, { 'retry-after': '1' });
}

/**
 * 503 `committed: true`: a write committed and its reply was lost. `version` is the database's version the probe read
 * (the group's last commit): not in the body, where a caller would take it for its own request's, but for the
 * service, which replicates it as it would a 200's (src/db/service.ts, `replicated`).
 */
export class LostCommitError extends ApiError {
  readonly version: number;

  constructor(message: string, version: number) {
    super('unavailable', message, { committed: true }, { 'retry-after': '1' });
    this.version = version;
  }
}

export function lostToApiError(e: unknown, budgetMs: number): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof QueueError) return new ApiError('unavailable', e.message, { committed: false }, { 'retry-after': '1' });
  if (e instanceof LostError && e.reason === 'timeout') {
    return new ApiError('query_timeout', `the statement ran past ${budgetMs} ms (DB_QUERY_TIMEOUT_MS) and was stopped; nothing of this request was applied`);
  }
  if (e instanceof LostError && e.reason === 'memory') {
    const limit = e.limitBytes ?? 0;
    return new ApiError('quota_exceeded', `the statement added more than ${sizeText(limit)} to its executor process's memory (wide rows of large values, a huge statement), the limit per executor process (DB_MEMORY_MAX_BYTES), and it was stopped; nothing of this request was applied`, { memoryMaxBytes: limit });
  }
  if (e instanceof LostError && e.reason === 'temp_space') {
    const limit = e.limitBytes ?? 0;
    return new ApiError('quota_exceeded', `the statement's temporary files (a sort, GROUP BY, DISTINCT, a materialized subquery or CTE, an index build, a statement journal) grew past ${sizeText(limit)}, the limit per executor process (DB_TEMP_MAX_BYTES), and it was stopped; nothing of this request was applied`, { tempMaxBytes: limit });
  }
  // Only while closing does a job stay unstarted (else it runs elsewhere, Scheduler.dispatch): it never began.
  if (e instanceof LostError && e.reason === 'unstarted') return new ApiError('unavailable', 'the server is shutting down: nothing of this request ran, retry after a second', { committed: false }, { 'retry-after': '1' });
  return new ApiError('internal', 'the executor stopped while running this request; nothing of it was applied');
}

/** Why a process was stopped, as said to the requests on it that did not cause it. */
const STOPPED_BECAUSE = {
  timeout: 'was stopped because another statement on it ran past its time limit (DB_QUERY_TIMEOUT_MS)',
  temp_space: 'was stopped because another statement\'s temporary files on it grew past DB_TEMP_MAX_BYTES',
  memory: 'was stopped because another statement on it grew its memory past DB_MEMORY_MAX_BYTES',
} as const;

/**
 * An interactive transaction's message lost with its process (not its COMMIT: commit-probe.ts). The transaction lived
 * on a connection there, so it is gone, rolled back by SQLite's journal: the caller is told so, and that it may begin
 * again (503), unless this statement itself was stopped for its limits (their own errors, saying the transaction ended).
 */
export function transactionLost(e: unknown, budgetMs: number, proc: ExecutorProcess, closing: boolean): ApiError {
  const ended = 'the interactive transaction ended with its executor process and was rolled back: nothing of it was applied';
  if (e instanceof LostError && (e.reason === 'timeout' || e.reason === 'temp_space' || e.reason === 'memory')) {
    const own = lostToApiError(e, budgetMs);
    return new ApiError(own.code, `${own.message}; ${ended}`, own.details, own.headers);
  }
  if (!(e instanceof LostError)) return lostToApiError(e, budgetMs);
  const why = closing ? 'was closed (the server is shutting down)' : proc.stoppedFor === null ? 'exited (a crash, or killed from outside)' : STOPPED_BECAUSE[proc.stoppedFor];
  const when = e.reason === 'unstarted' ? 'before this statement ran' : 'while this statement ran';
  return new ApiError('unavailable', `this transaction's executor process ${why} ${when}: ${ended}; begin it again`, { committed: false }, { 'retry-after': '1' });
}
