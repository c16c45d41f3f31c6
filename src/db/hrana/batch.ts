// Hrana batches (HRANA_3_SPEC "Batches", "Conditions"): steps run in order, each only if its condition holds.
import { ApiError } from '../../shared/errors.ts';
import { blankEnd, isSpace, skipQuotedOrComment } from '../statement-end.ts';
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

const CONTROL_WORD = /^(BEGIN|COMMIT|END|ROLLBACK|SAVEPOINT|RELEASE|PRAGMA)\b/i;

/**
 * A statement as the stream's checks read it (transaction control, the foreign_keys pragma, reads): without the
 * comments before it, and a transaction-control statement or pragma also without those after it and its trailing
 * `;` — SQLite reads `ROLLBACK -- undo` as ROLLBACK, so the stream must too (it ran as a savepoint statement on the
 * transaction and was refused; `PRAGMA foreign_keys=OFF; -- rebuild` left keys on, and a DROP TABLE cascaded).
 */
export function headOf(sql: string): string {
  const start = blankEnd(sql, 0, false);
  const text = start === 0 ? sql : sql.slice(start);
  if (!CONTROL_WORD.test(text)) return text;
  if (!MAY_HOLD_COMMENT.test(text)) return text.slice(0, trimmedEnd(text, text.length)); // no copy: most are short
  // Each comment becomes a space; strings and quoted names stay as written. Written into one array of UTF-16 code
  // units: a string or a piece per character, or per comment, held the event loop seconds for 30 MB of comments.
  const out = new Uint16Array(text.length);
  let o = 0;
  for (let j = 0; j < text.length;) {
    const c = text.charCodeAt(j);
    const end = c === 45 || c === 47 || c === 39 || c === 34 || c === 96 || c === 91 ? skipQuotedOrComment(text, j) : null;
    if (end === null) {
      out[o++] = c;
      j++;
    } else if (c === 45 || c === 47) {
      out[o++] = 32;
      j = end;
    } else {
      for (const stop = Math.min(end, text.length); j < stop; j++) out[o++] = text.charCodeAt(j);
    }
  }
  while (o > 0 && (out[o - 1] === 59 || isSpace(out[o - 1]!))) o--; // `;` and spaces after it
  return Buffer.from(out.buffer, 0, 2 * o).toString('utf16le');
}

/** What may begin a comment or a quoted string or name: a text without any is read as it is. */
const MAY_HOLD_COMMENT = /[-/'"`[]/;

/** The end of `text` before its trailing `;`s and spaces, from `end` back. */
function trimmedEnd(text: string, end: number): number {
  while (end > 0 && (text.charCodeAt(end - 1) === 59 || isSpace(text.charCodeAt(end - 1)))) end--;
  return end;
}

/** libSQL's read-only transaction (`transaction('read')`, `batch(…, 'read')` of @libsql/client). */
export const READ_ONLY_BEGIN = /^\s*BEGIN\s+(TRANSACTION\s+)?READONLY\b/i;

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

/** Does `c` require step `prev` to have succeeded (alone, or with "not in autocommit")? */
function chained(c: BatchCond | null | undefined, prev: number): boolean {
  if (c?.type === 'ok') return c.step === prev;
  if (c?.type !== 'and' || !Array.isArray(c.conds)) return false;
  return c.conds.some((x) => x?.type === 'ok' && x.step === prev)
    && c.conds.every((x) => (x?.type === 'ok' && x.step === prev) || (x?.type === 'not' && x.cond?.type === 'is_autocommit'));
}

/**
 * Finds the transaction a batch opens whole: BEGIN, statements each chained on the one before, COMMIT chained on
 * the last, optionally a ROLLBACK (what @libsql/client's batch() sends). Such a block runs as one request; any other
 * batch runs step by step (a BEGIN in it opens an interactive transaction). `sqls` are the steps' `headOf` texts.
 */
export function transactionBlock(sqls: string[], steps: BatchStep[], control: RegExp): Block | null {
  const begin = sqls.findIndex((s) => control.test(s));
  if (begin === -1 || !/^\s*BEGIN\b/i.test(sqls[begin]!)) return null;
  let commit = begin + 1;
  while (commit < sqls.length && !control.test(sqls[commit]!)) commit++;
  if (commit >= sqls.length || !/^\s*(COMMIT|END)\b/i.test(sqls[commit]!)) return null;
  for (let i = begin + 1; i <= commit; i++) if (i > begin + 1 && !chained(steps[i]!.condition, i - 1)) return null;
  if (commit > begin + 1 && !chained(steps[begin + 1]!.condition, begin)) return null;
  const rollback = commit + 1 < sqls.length && /^\s*ROLLBACK[\s;]*$/i.test(sqls[commit + 1]!) ? commit + 1 : null;
  for (let i = (rollback ?? commit) + 1; i < sqls.length; i++) if (control.test(sqls[i]!)) return null;
  return { begin, commit, rollback, readOnly: READ_ONLY_BEGIN.test(sqls[begin]!) };
}

/** Is step `i` of a batch with `block` run in autocommit (outside the block's transaction)? */
export function blockAutocommit(block: Block): (i: number, outcomes: Outcome[]) => boolean {
  return (i, outcomes) => i <= block.begin || (block.rollback !== null ? i > block.rollback : i > block.commit)
    || (i === block.rollback && outcomes[block.commit] === 'ok');
}

/**
 * Refuses, before any step runs, a condition of an unknown shape or one that names a step not before its own
 * (HRANA_3_SPEC: a condition refers to earlier steps; a later or missing one would silently read as "not ok").
 */
export function checkConditions(steps: BatchStep[]): void {
  const check = (c: BatchCond | null | undefined, i: number, where: string): void => {
    if (c === null || c === undefined) return;
    switch (c?.type) {
      case 'ok': case 'error':
        if (!Number.isSafeInteger(c.step) || c.step < 0 || c.step >= i) throw new ApiError('invalid_request', `${where}: step ${JSON.stringify(c.step)} is not an earlier step of the batch (0 to ${i - 1})`);
        return;
      case 'not': return check(c.cond, i, `${where}.cond`);
      case 'and': case 'or':
        if (!Array.isArray(c.conds)) throw new ApiError('invalid_request', `${where}.conds must be an array`);
        c.conds.forEach((x, k) => check(x, i, `${where}.conds[${k}]`));
        return;
      case 'is_autocommit': return;
    }
    throw new ApiError('invalid_request', `${where}: unknown batch condition ${JSON.stringify(String((c as { type?: unknown })?.type).slice(0, 40))}`);
  };
  steps.forEach((s, i) => check(s?.condition, i, `steps[${i}].condition`));
}

/** Evaluates every step's condition in order, running those that hold with `run`. */
export async function evaluate(steps: BatchStep[], autocommit: (i: number, outcomes: Outcome[]) => boolean, run: (i: number) => Promise<Outcome>): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  for (let i = 0; i < steps.length; i++) {
    outcomes.push(holds(steps[i]?.condition, outcomes, autocommit(i, outcomes), `steps[${i}].condition`) ? await run(i) : 'skipped');
  }
  return outcomes;
}
