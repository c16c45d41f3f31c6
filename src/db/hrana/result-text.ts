// Statement results as the executor rendered them (executor/hrana-result.ts), cut apart as text: a batch's results
// and a cursor's rows are passed on without JSON.parse and JSON.stringify of every value. Both, on a 16 MB result of
// a 200-byte request, held every org's requests about a second (attack round 11).
import { jsonStringEnd } from '../../shared/http.ts';

/**
 * Where the elements of the JSON array whose `[` is at `open` begin and end (`bounds`: begin, end, begin, end, …), and
 * the index after its `]`; null when `text` is not such an array there. Strings are skipped whole, so no character
 * inside one is read as JSON.
 */
export function arrayItems(text: string, open: number): { bounds: number[]; end: number } | null {
  if (text.charCodeAt(open) !== 91) return null;
  const bounds: number[] = [];
  let depth = 0;
  let start = open + 1;
  for (let i = open + 1, n = text.length; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 34) {
      i = jsonStringEnd(text, i);
      if (i === -1) return null;
    } else if (c === 91 || c === 123) {
      depth++;
    } else if (depth > 0) {
      if (c === 93 || c === 125) depth--;
    } else if (c === 44 || c === 93) {
      if (i > start || c === 44) bounds.push(start, i);
      if (c === 93) return { bounds, end: i + 1 };
      start = i + 1;
    }
  }
  return null;
}

/** The texts `bounds` (arrayItems') mark in `text`, each wrapped in `before` and `after`. */
export function slices(text: string, bounds: number[], before = '', after = ''): string[] {
  const out = new Array<string>(bounds.length / 2);
  for (let k = 0; k < bounds.length; k += 2) out[k / 2] = before + text.slice(bounds[k], bounds[k + 1]) + after;
  return out;
}

const COLS = '{"cols":';
const ROWS = ',"rows":';

/**
 * A StmtResult's text cut into its columns' JSON, each row's JSON and the text of its other fields after the rows
 * (`,"affected_row_count":…}`), or null when it is not in the shape the executor writes (`{"cols":[…],"rows":[…],…}`).
 */
export function resultParts(text: string): { cols: string; rows: { text: string; bounds: number[] }; rest: string } | null {
  if (!text.startsWith(COLS)) return null;
  const cols = arrayItems(text, COLS.length);
  if (!cols || !text.startsWith(ROWS, cols.end)) return null;
  const rows = arrayItems(text, cols.end + ROWS.length);
  if (!rows) return null;
  return { cols: text.slice(COLS.length, cols.end), rows: { text, bounds: rows.bounds }, rest: text.slice(rows.end) };
}

/** A StmtResult's text with its rows dropped (`want_rows: false`), or null when it is not in the executor's shape. */
export function withoutRows(text: string): string | null {
  if (!text.startsWith(COLS)) return null;
  const cols = arrayItems(text, COLS.length);
  const rows = cols && text.startsWith(ROWS, cols.end) ? arrayItems(text, cols.end + ROWS.length) : null;
  return rows ? `${text.slice(0, cols!.end)}${ROWS}[]${text.slice(rows.end)}` : null;
}

const BATCH_OK = '{"type":"ok","response":{"type":"batch","result":{"step_results":';
const ERRORS = ',"step_errors":';

/** A pipeline's ok answer to a batch, from its steps' result texts ("null" for none) and their errors. */
export function batchText(results: string[], errors: unknown[]): string {
  return `${BATCH_OK}[${results.join(',')}]${ERRORS}${JSON.stringify(errors)}}}}`;
}

/** batchText's steps again, each result's text ("null" for none) with its error; null for any other answer. */
export function batchParts(text: string): { results: string[]; errors: unknown[] } | null {
  if (!text.startsWith(BATCH_OK)) return null;
  const results = arrayItems(text, BATCH_OK.length);
  if (!results || !text.startsWith(ERRORS, results.end)) return null;
  return {
    results: slices(text, results.bounds),
    errors: JSON.parse(text.slice(results.end + ERRORS.length, text.length - 3)) as unknown[],
  };
}
