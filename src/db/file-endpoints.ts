// Import, export and snapshot (SPEC 4.9, 4.12): each holds a file in DATA_DIR/tmp, at most MAX_FILES_PER_REPO per repo.
import { statSync } from 'node:fs';
import { ApiError } from '../shared/errors.ts';
import type { Config } from '../shared/config.ts';
import type { DbRequest, DbResponse, Scope } from './contract.ts';
import type { ExecReply, ExecutorPool } from './executor/pool.ts';
import type { Layout } from './layout.ts';
import { importBudget, type importParams, receiveBody } from './import.ts';
import { json, notFound, replyError } from './pipeline-backend.ts';
import { removeCopy } from './history/rebuild.ts';
import { exportHeaders, makeFile, streamFile, type MadeFile } from './files.ts';

/**
 * Imports being received and exports and snapshots being sent that one repo may have under way at once. Each holds a
 * file in DATA_DIR/tmp of up to DB_MAX_SIZE_BYTES until its upload ends or its reader has read it to the end, and a
 * client that never reads holds it for good: without a bound, one repo's secret filled the disk every tenant shares.
 */
export const MAX_FILES_PER_REPO = 4;

/** What of the service the file endpoints need. */
export interface FileParts {
  pool: ExecutorPool;
  layout: Layout;
  tmpDir: string;
  limits: Pick<Config['db'], 'maxSizeBytes' | 'queryTimeoutMs'>;
  exists(scope: Scope): boolean;
  /** A write, admitted in a cluster until it is over. */
  admittedWrite(scope: Scope, work: () => Promise<DbResponse>): Promise<DbResponse>;
  /** A write's reply once it is on the follower too (cluster mode). */
  replicated(scope: Scope, write: Promise<ExecReply>): Promise<ExecReply>;
}

export class FileEndpoints {
  private readonly parts: FileParts;
  /** Files in tmpDir held for requests now, per `org/repo` (MAX_FILES_PER_REPO). */
  private readonly filesHeld = new Map<string, number>();

  constructor(parts: FileParts) {
    this.parts = parts;
  }

  /** SPEC 4.12: an upload, authorized already, received into a file, then installed by the executor as one write. */
  async importUpload(scope: Scope, params: ReturnType<typeof importParams>, upload: NonNullable<DbRequest['upload']>): Promise<DbResponse> {
    const release = this.holdFile(scope);
    try {
      return await this.receiveImport(scope, params, upload);
    } finally {
      release();
    }
  }

  /** For mirrors (SPEC 4.9): a consistent copy with its internal tables, as the executor made it. */
  snapshot(scope: Scope, path: string): Promise<DbResponse> {
    return this.fileReply(scope, { op: 'snapshot', path }, 'sqlite', { 'content-type': 'application/vnd.sqlite3' });
  }

  /** SPEC 4.12: a clean copy or a SQL dump. */
  exportFile(scope: Scope, path: string, format: 'sqlite' | 'sql'): Promise<DbResponse> {
    return this.fileReply(scope, { op: 'export', path, format }, format, exportHeaders(scope.database, format));
  }

  /** A consistent copy of the database with its internal tables, in DATA_DIR/tmp; the caller removes it. */
  async snapshotFile(scope: Scope): Promise<{ path: string; version: number }> {
    if (!this.parts.exists(scope)) throw notFound(scope);
    const made = await this.makeFile({ op: 'snapshot', path: this.parts.layout.path(scope) }, 'sqlite');
    if ('path' in made) return made;
    throw replyError(made.body);
  }

  /**
   * Takes one of the repo's MAX_FILES_PER_REPO file slots, before any file is made: 503 `unavailable` when all are
   * taken. Returns the function that gives it back (once, however often it is called).
   */
  private holdFile(scope: Scope): () => void {
    const key = `${scope.org}/${scope.repo}`;
    const held = this.filesHeld.get(key) ?? 0;
    if (held >= MAX_FILES_PER_REPO) {
      throw new ApiError('unavailable', `this repo has ${MAX_FILES_PER_REPO} imports, exports and snapshots under way, the most it may have at once (each holds a file on the server's disk until it is uploaded, or read to its end); nothing of this request ran, retry once one has finished`, { committed: false, limit: MAX_FILES_PER_REPO }, { 'retry-after': '1' });
    }
    this.filesHeld.set(key, held + 1);
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const left = (this.filesHeld.get(key) ?? 1) - 1;
      if (left > 0) this.filesHeld.set(key, left);
      else this.filesHeld.delete(key);
    };
  }

  private receiveImport(scope: Scope, params: ReturnType<typeof importParams>, upload: NonNullable<DbRequest['upload']>): Promise<DbResponse> {
    const { pool, layout, tmpDir, limits } = this.parts;
    return this.parts.admittedWrite(scope, async () => {
      if (params.mode === 'create' && this.parts.exists(scope)) throw new ApiError('invalid_request', `database ${params.database} exists: import with mode=replace to overwrite it`);
      const source = await receiveBody(upload.stream, tmpDir, limits.maxSizeBytes);
      const scratch = `${source}.sqlite`; // where SQL text is loaded: named here, so it goes even if its executor is killed
      try {
        const body = Buffer.from(JSON.stringify({ source, scratch, format: params.format, mode: params.mode }));
        const budget = importBudget(statSync(source).size, limits.queryTimeoutMs);
        return json(await this.parts.replicated(scope, pool.write(scope, layout.path(scope), 'import', body, budget)));
      } finally {
        removeCopy(source); // with the -wal/-shm an upload in WAL mode gets when the executor opens it
        removeCopy(scratch);
      }
    });
  }

  private async fileReply(scope: Scope, header: Record<string, unknown>, suffix: string, headers: Record<string, string>): Promise<DbResponse> {
    if (!this.parts.exists(scope)) throw notFound(scope); // before a slot is taken: a missing database holds none
    // The slot is held until the file is gone: read to its end, or its reader gone (the stream closes either way).
    const release = this.holdFile(scope);
    let made: Awaited<ReturnType<FileEndpoints['makeFile']>>;
    try {
      made = await this.makeFile(header, suffix);
    } catch (e) {
      release();
      throw e;
    }
    if (!('path' in made)) {
      release();
      return json(made);
    }
    try {
      return streamFile(made, headers, release);
    } catch (e) {
      release();
      throw e;
    }
  }

  /** A file's time budget: a snapshot or export of a large database takes a while. */
  private makeFile(header: Record<string, unknown>, suffix: string): Promise<MadeFile | ExecReply> {
    return makeFile(this.parts.pool, this.parts.tmpDir, Math.max(this.parts.limits.queryTimeoutMs, 600_000), header, suffix);
  }
}
