// HRANA_3_SPEC "Execute a batch using a cursor" (POST v3/cursor): the batch's result as newline-separated JSON, a
// CursorRespBody line then CursorEntry lines. The batch runs as a pipeline's batch request does; its result is
// written out as entries (the spec lets a server send them incrementally; this one sends them once the batch ran).
import type { StmtResult } from './values.ts';
import { parseKeepingNegZero } from '../values.ts';

interface HranaError { message: string; code?: string | null }
type StreamResult = { type: 'ok'; response: { result: { step_results: (StmtResult | null)[]; step_errors: (HranaError | null)[] } } } | { type: 'error'; error: HranaError };

/** The response body of v3/cursor: `baton`'s line, then the entries of `result` (a pipeline's batch result). */
export function cursorBody(baton: string | null, result: string): string {
  const lines = [JSON.stringify({ baton, base_url: null })];
  const parsed = parseKeepingNegZero(result) as StreamResult;
  if (parsed.type === 'error') {
    // The batch ran as a pipeline's first request: its paths are named as the cursor's body names them.
    lines.push(JSON.stringify({ type: 'error', error: { ...parsed.error, message: parsed.error.message.replace(/^requests\[0\]\.batch\b/, 'batch') } }));
  } else {
    const { step_results: results, step_errors: errors } = parsed.response.result;
    results.forEach((r, step) => {
      if (r) {
        lines.push(JSON.stringify({ type: 'step_begin', step, cols: r.cols }));
        for (const row of r.rows) lines.push(JSON.stringify({ type: 'row', row }));
        lines.push(JSON.stringify({ type: 'step_end', affected_row_count: r.affected_row_count, last_insert_rowid: r.last_insert_rowid }));
      } else if (errors[step]) {
        lines.push(JSON.stringify({ type: 'step_error', step, error: errors[step] }));
      }
    });
  }
  return `${lines.join('\n')}\n`;
}
