// Requests answered with a whole file (SPEC 4.9 snapshots, 4.12 exports): an executor writes it into DATA_DIR/tmp,
// the reply streams it, and it is removed once sent, or at once when it cannot be.
import { createReadStream, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { DbResponse } from './contract.ts';
import type { ExecReply, ExecutorPool } from './executor/pool.ts';
import { removeCopy } from './history/rebuild.ts';

/** The executor's file in `tmpDir` with the version it holds (the caller removes it), or the executor's refusal. */
export async function makeFile(pool: ExecutorPool, tmpDir: string, budgetMs: number, header: Record<string, unknown>, suffix: string): Promise<{ path: string; version: number } | ExecReply> {
  const target = join(tmpDir, `${header.op as string}-${randomBytes(8).toString('hex')}.${suffix}`);
  let res: ExecReply | null = null;
  try {
    res = await pool.read({ ...header, target }, undefined, budgetMs);
  } finally {
    // A refusal, or an executor killed making it, may leave the target, the SQL export's copy and their journals.
    if (res?.status !== 200) [target, `${target}.sqlite`].forEach(removeCopy);
  }
  if (res.status !== 200) return res;
  return { path: target, version: (JSON.parse(res.body.toString('utf8')) as { version: number }).version };
}

/** The reply that streams `made.path` and then removes it. */
export function streamFile(made: { path: string; version: number }, headers: Record<string, string>): DbResponse {
  const stream = createReadStream(made.path);
  stream.on('close', () => rmSync(made.path, { force: true }));
  return { status: 200, headers: { ...headers, 'x-db-version': String(made.version), 'content-length': String(statSync(made.path).size) }, body: stream };
}

/** SPEC 4.12's reply headers for an export of `database` as a clean copy or a SQL dump. */
export function exportHeaders(database: string, format: 'sqlite' | 'sql'): Record<string, string> {
  return format === 'sqlite'
    ? { 'content-type': 'application/vnd.sqlite3', 'content-disposition': `attachment; filename="${database}.sqlite"` }
    : { 'content-type': 'application/sql; charset=utf-8', 'content-disposition': `attachment; filename="${database}.sql"` };
}
