// Files an executor writes into DATA_DIR/tmp for a request: snapshots and exports (SPEC 4.9, 4.12), streamed and
// then removed, or removed at once when they cannot be; and the names the service gives them (a restore's copy too).
import { createReadStream, rm, statSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { LAST_MIGRATION_HEADER, type DbResponse } from './contract.ts';
import type { ExecReply, ExecutorPool } from './executor/pool.ts';
import { removeCopy } from './history/rebuild.ts';

/** A new file's name in DATA_DIR/tmp for `kind` (an export, a snapshot, a restore's copy). */
export function tmpFile(tmpDir: string, kind: string, suffix: string): string {
  return join(tmpDir, `${kind}-${randomBytes(8).toString('hex')}.${suffix}`);
}

/** The executor's file in `tmpDir` with the version it holds (the caller removes it), or the executor's refusal. */
export interface MadeFile { path: string; version: number; lastMigration?: string | null }

export async function makeFile(pool: ExecutorPool, tmpDir: string, budgetMs: number, header: Record<string, unknown>, suffix: string): Promise<MadeFile | ExecReply> {
  const target = tmpFile(tmpDir, header.op as string, suffix);
  let res: ExecReply | null = null;
  try {
    res = await pool.read({ ...header, target }, undefined, budgetMs);
  } finally {
    // A refusal, or an executor killed making it, may leave the target, the SQL export's copy and their journals.
    if (res?.status !== 200) [target, `${target}.sqlite`].forEach(removeCopy);
  }
  if (res.status !== 200) return res;
  const { version, lastMigration } = JSON.parse(res.body.toString('utf8')) as MadeFile;
  return { path: target, version, lastMigration };
}

/** The reply that streams `made.path` and then removes it; `removed` is called as its removal starts. */
export function streamFile(made: MadeFile, headers: Record<string, string>, removed: () => void = () => {}): DbResponse {
  const stream = createReadStream(made.path);
  stream.on('close', () => {
    removed(); // before the unlink is seen done: a caller who sees the file gone may at once take its slot
    rm(made.path, { force: true }, () => {}); // an event handler must not throw; tmp is emptied at start
  });
  const migration: Record<string, string> = made.lastMigration ? { [LAST_MIGRATION_HEADER]: made.lastMigration } : {}; // an export's (ids are header-safe: SPEC 4.6)
  return { status: 200, headers: { ...headers, 'x-db-version': String(made.version), ...migration, 'content-length': String(statSync(made.path).size) }, body: stream };
}

/** SPEC 4.12's reply headers for an export of `database` as a clean copy or a SQL dump. */
export function exportHeaders(database: string, format: 'sqlite' | 'sql'): Record<string, string> {
  return format === 'sqlite'
    ? { 'content-type': 'application/vnd.sqlite3', 'content-disposition': `attachment; filename="${database}.sqlite"` }
    : { 'content-type': 'application/sql; charset=utf-8', 'content-disposition': `attachment; filename="${database}.sql"` };
}
