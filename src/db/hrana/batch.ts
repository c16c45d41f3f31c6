// Hrana batches (HRANA_3_SPEC "Batches", "Conditions"): steps run in order, each only if its condition holds.
import { ApiError } from '../../shared/errors.ts';
import type { HranaStmt } from './values.ts';

export type BatchCond =
  | { type: 'ok'; step: number }
  | { type: 'error'; step: number }
  | { type: 'not'; cond: BatchCond }
  | { type: 'and'; conds: BatchCond[] }
  | { type: 'or'; conds: BatchCond[] }
  | { type: 'is_autocommit' };

export interface BatchStep { condition?: BatchCond | null; stmt: HranaStmt }

export type Outcome = 'ok' | 'error' | 'skipped';

/** Steps `begin` (BEGIN) to `commit` (COMMIT), and the ROLLBACK that follows a failed commit, if the batch has one. */
export interface Block { begin: number; commit: number; rollback: number | null; readOnly: boolean }

function holds(c: BatchCond | null | undefined, outcomes: Outcome[], autocommit: boolean, where: string): boolean {
  if (c === null || c === undefined) return true;
  switch (c?.type) {
    case 'ok': return outcomes[c.step] === 'ok';
    case 'error': return outcomes[c.step] === 'error';
    case 'not': return !holds(c.cond, outcomes, autocommit, where);
    case 'and': return Array.isArray(c.conds) && c.conds.every((x) => holds(x, outcomes, autocommit, where));
    case 'or': return Array.isArray(c.conds) && c.conds.some((x) => holds(x, outcomes, autocommit, where));
    case 'is_autocommit': return autocommit;
  }
  throw new ApiError('invalid_request', `${where}: unknown batch condition ${JSON.stringify(String((c as { type?: unknown })?.type).slice(0, 40))}`);
}

/** A transaction opened by one request and continued by later ones (a stream holding a database's writes). */
export function interactiveUnsupported(): ApiError {
  return new ApiError('not_allowed', 'interactive transactions are not supported yet over the libSQL protocol: send the statements as one batch (client.batch(), db.batch()), which runs as one transaction');
}

/** Does `c` require step `prev` to have succeeded (alone, or with "not in autocommit")? */
function chained(c: BatchCond | null | undefined, prev: number): boolean {
  if (c?.type === 'ok') return c.step === prev;
  if (c?.type !== 'and' || !Array.isArray(c.conds)) return false;
  return c.conds.some((x) => x?.type === 'ok' && x.step === prev)
    && c.conds.every((x) => (x?.type === 'ok' && x.step === prev) || (x?.type === 'not' && x.cond?.type === 'is_autocommit'));
}

/**
 * Finds the transaction a batch opens: BEGIN, statements each chained on the one before, COMMIT chained on the last,
 * and optionally a ROLLBACK. Such a block runs as one request; any other use of transaction control is refused.
 */
export function transactionBlock(sqls: string[], steps: BatchStep[], control: RegExp): Block | null {
  const begin = sqls.findIndex((s) => control.test(s));
  if (begin === -1) return null;
  const unsupported = () => new ApiError('not_allowed', 'this batch uses transaction control in a shape this server does not run; send BEGIN, the statements (each on the success of the one before), COMMIT, as @libsql/client\'s batch() does');
  if (!/^\s*BEGIN\b/i.test(sqls[begin]!)) throw unsupported();
  let commit = begin + 1;
  while (commit < sqls.length && !control.test(sqls[commit]!)) {
    if (commit > begin + 1 && !chained(steps[commit]!.condition, commit - 1)) throw unsupported();
    commit++;
  }
  if (commit >= sqls.length) throw interactiveUnsupported();
  if (!/^\s*(COMMIT|END)\b/i.test(sqls[commit]!)) throw unsupported();
  if (commit > begin + 1 && !chained(steps[begin + 1]!.condition, begin)) throw unsupported();
  const rollback = commit + 1 < sqls.length && /^\s*ROLLBACK\s*;?\s*$/i.test(sqls[commit + 1]!) ? commit + 1 : null;
  for (let i = (rollback ?? commit) + 1; i < sqls.length; i++) if (control.test(sqls[i]!)) throw unsupported();
  return { begin, commit, rollback, readOnly: /^\s*BEGIN\s+(TRANSACTION\s+)?READONLY\b/i.test(sqls[begin]!) };
}

/** Evaluates every step's condition in order, running those that hold with `run`. */
export async function evaluate(steps: BatchStep[], block: Block | null, run: (i: number) => Promise<Outcome>): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  for (let i = 0; i < steps.length; i++) {
    const autocommit = !block || i <= block.begin || (block.rollback !== null ? i > block.rollback : i > block.commit)
      || (i === block.rollback && outcomes[block.commit] === 'ok');
    outcomes.push(holds(steps[i]?.condition, outcomes, autocommit, `steps[${i}].condition`) ? await run(i) : 'skipped');
  }
  return outcomes;
}
