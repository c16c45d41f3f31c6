// HRANA_3_SPEC "Execute a batch using a cursor" (POST v3/cursor): the batch's result as newline-separated JSON, a
// CursorRespBody line then CursorEntry lines. The batch runs as a pipeline's batch request does; its result is
// written out as entries (the spec lets a server send them incrementally; this one sends them once the batch ran).
import type { StmtResult } from './values.ts';
import { parseKeepingNegZero } from '../values.ts';
import { arrayItems, batchParts, resultParts, slices } from './result-text.ts';

interface HranaError { message: string; code?: string | null }

/** The response body of v3/cursor: `baton`'s line, then the entries of `result` (a pipeline's answer to the batch). */
export function cursorBody(baton: string | null, result: string): string {
  const lines = [JSON.stringify({ baton, base_url: null })];
  const batch = batchParts(result);
  if (batch === null) {
    // The batch ran as a pipeline's first request: its paths are named as the cursor's body names them.
    const { error } = JSON.parse(result) as { error: HranaError };
    lines.push(JSON.stringify({ type: 'error', error: { ...error, message: error.message.replace(/^requests\[0\]\.batch\b/, 'batch') } }));
  } else {
    batch.results.forEach((text, step) => {
      // Rows go out as the executor wrote them: parsed and written again, 15 MB of them held every org's requests 0.7 s.
      const parts = text === 'null' ? null : resultParts(text) ?? partsOf(parseKeepingNegZero(text) as StmtResult);
      if (parts) {
        lines.push(`{"type":"step_begin","step":${step},"cols":${parts.cols}}`);
        for (const line of slices(parts.rows.text, parts.rows.bounds, '{"type":"row","row":', '}')) lines.push(line);
        const end = JSON.parse(`{${parts.rest.slice(1)}`) as Partial<StmtResult>;
        lines.push(JSON.stringify({ type: 'step_end', affected_row_count: end.affected_row_count, last_insert_rowid: end.last_insert_rowid }));
      } else if (batch.errors[step]) {
        lines.push(JSON.stringify({ type: 'step_error', step, error: batch.errors[step] }));
      }
    });
  }
  return `${lines.join('\n')}\n`;
}

/** A result that is not the executor's text (a transaction's statement, parsed on its way) in resultParts' terms. */
function partsOf(r: StmtResult): NonNullable<ReturnType<typeof resultParts>> {
  const rows = JSON.stringify(r.rows);
  return { cols: JSON.stringify(r.cols), rows: { text: rows, bounds: arrayItems(rows, 0)!.bounds }, rest: `,${JSON.stringify({ affected_row_count: r.affected_row_count, last_insert_rowid: r.last_insert_rowid }).slice(1)}` };
}
