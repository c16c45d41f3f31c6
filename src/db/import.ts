// SPEC 4.12 import, the HTTP side: the query string and content type are checked, then the body is streamed to a
// file in DATA_DIR/tmp, counted against DB_MAX_SIZE_BYTES as it arrives (not DB_MAX_BODY_BYTES: a database file is
// bigger than any request). The executor validates and installs it (executor/history-ops.ts).
import { createWriteStream, rmSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { DbRequest, DbResponse } from './contract.ts';
import { finished } from 'node:stream/promises';
import { ApiError } from '../shared/errors.ts';
import { encodedBody } from '../shared/body-budget.ts';
import { checkDatabase } from '../shared/names.ts';
import type { WriteBudget } from './executor/write-lanes.ts';
import { sizeText } from './executor/temp-space.ts';

export interface ImportParams { database: string; mode: 'create' | 'replace'; format: 'sqlite' | 'sql' }

const TYPES: Record<string, 'sqlite' | 'sql'> = { 'application/vnd.sqlite3': 'sqlite', 'application/x-sqlite3': 'sqlite', 'application/sql': 'sql' };

/** Checks what can be checked before the body is read: names, mode and format. */
export function importParams(query: string, contentType: string | undefined): ImportParams {
  const params = new URLSearchParams(query);
  for (const key of params.keys()) {
    if (key !== 'database' && key !== 'mode') throw new ApiError('invalid_request', `unknown query parameter ${JSON.stringify(key.slice(0, 40))} for /_db/import; use database and mode`);
    if (params.getAll(key).length > 1) throw new ApiError('invalid_request', `query parameter ${key} is given more than once for /_db/import`);
  }
  const database = checkDatabase(params.get('database') ?? undefined);
  const mode = params.get('mode') ?? 'create';
  if (mode !== 'create' && mode !== 'replace') throw new ApiError('invalid_request', 'mode must be create (the database must not exist) or replace');
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  const format = TYPES[type];
  if (!format) throw new ApiError('invalid_request', 'send the body as Content-Type: application/vnd.sqlite3 (a SQLite file) or application/sql (SQL text, as a dump writes it)');
  return { database, mode, format };
}

/**
 * Streams the body into a new file; 507 past `maxBytes` (the file is removed). Returns the file's path. On a refusal
 * the rest of the body is drained, not cut (a reset would lose the reply), and the route closes the connection.
 */
export async function receiveBody(body: Readable, tmpDir: string, maxBytes: number): Promise<string> {
  // Gone while the request waited (a cluster's admit asks etcd): its 'close' has passed, and would never be heard below.
  if (body.destroyed) throw cutOff();
  const path = join(tmpDir, `upload-${randomBytes(8).toString('hex')}`);
  const out = createWriteStream(path, { mode: 0o600 });
  let seen = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      const stop = (e: unknown) => {
        body.removeListener('data', onData);
        body.resume(); // the rest is read and dropped: a client sends its whole body before it reads the reply
        reject(e);
      };
      const onData = (chunk: Buffer) => {
        seen += chunk.length;
        if (seen > maxBytes) return stop(new ApiError('quota_exceeded', `the import is larger than DB_MAX_SIZE_BYTES (${maxBytes} bytes); nothing was changed`));
        if (!out.write(chunk)) {
          body.pause();
          out.once('drain', () => body.resume());
        }
      };
      body.on('data', onData);
      body.once('end', resolve);
      body.once('error', () => stop(cutOff()));
      body.once('close', () => { if (!body.readableEnded) stop(cutOff()); });
      out.once('error', stop);
    });
    out.end();
    await finished(out);
    if (seen === 0) throw new ApiError('invalid_request', 'the body is empty: send the SQLite file or SQL text to import');
    return path;
  } catch (e) {
    out.destroy();
    rmSync(path, { force: true });
    throw e;
  }
}

/** The most any import may take, whatever its size (as a snapshot or an export). */
const IMPORT_MAX_MS = 600_000;
/** Time an import gets per MiB uploaded: ~40 times what checking and copying a MiB takes here (~25 ms). */
const IMPORT_MS_PER_MIB = 1000;

/**
 * The time an upload of `bytes` is given to be checked and installed: twice the statement limit, plus a second per
 * MiB, at most 10 minutes. A fixed 10 minutes let a 32 KB file whose CHECK constraints cost much per row hold an
 * executor for as long; the work an honest file needs grows with its size.
 */
export function importBudget(bytes: number, queryTimeoutMs: number): WriteBudget {
  const cap = Math.max(queryTimeoutMs, IMPORT_MAX_MS);
  const ms = Math.min(cap, 2 * queryTimeoutMs + Math.ceil((bytes / 2 ** 20) * IMPORT_MS_PER_MIB));
  return {
    ms,
    over: () => new ApiError('query_timeout', `checking and installing the import ran past ${ms} ms, the time an upload of ${sizeText(bytes)} is given (twice DB_QUERY_TIMEOUT_MS plus 1 s per MiB, at most ${cap / 1000} s), and was stopped: its rows cost too much to check (CHECK constraints, indexes or generated columns that are slow per row); nothing was changed`, { budgetMs: ms, bytes }),
  };
}

const cutOff = () => new ApiError('invalid_request', 'the upload ended before its end (the connection was closed); nothing was changed');

/**
 * Registers POST /:repo/_db/import, its body passed on as a stream (no body parser, no body limit: receiveBody
 * bounds it). `handle` completes the request (org, repo, caller) and answers it.
 */
export async function registerImportRoute(app: FastifyInstance, handle: (req: FastifyRequest, upload: NonNullable<DbRequest['upload']>) => Promise<DbResponse>): Promise<void> {
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser('*', (_req, payload, done) => done(null, payload));
    scope.post('/:repo/_db/import', async (req, reply) => {
      const q = req.url.indexOf('?');
      const stream = req.body instanceof Readable ? req.body : Readable.from([]);
      let res: DbResponse;
      try {
        const encoded = encodedBody(req.raw);
        if (encoded !== null) throw encoded;
        res = await handle(req, { stream, query: q < 0 ? '' : req.url.slice(q + 1), contentType: req.headers['content-type'] });
      } finally {
        // Refused before the whole body was read: the rest is drained, and the connection ends after the reply.
        if (!stream.readableEnded) {
          stream.resume();
          reply.header('connection', 'close');
        }
      }
      reply.code(res.status);
      if (res.headers) reply.headers(res.headers);
      return reply.type('application/json; charset=utf-8').send(res.body);
    });
  });
}
