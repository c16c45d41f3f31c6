// The scopebase client for the database API (SPEC 4): `import { createClient } from 'scopebase/client'`.
// No dependencies: node:http on Node (Host and `*.localhost` work), fetch elsewhere.
import { errorFor, ScopebaseError } from './errors.ts';
import { decodeValue, encodeParams, type Params, type Value } from './values.ts';
import { defaultSender, fetchSender, NoReply, type FileBody, type Progress, type SaveTo, type Send } from './transport.ts';
import { MigrationOrderError, readMigrationFolder, type Migration } from './migrations.ts';
import { retryDelayMs } from './retry.ts';

export * from './errors.ts';
export type { Value, WireValue, InValue, Params } from './values.ts';
export type { Migration, MigrationFolder, SkippedFile } from './migrations.ts';
export type { Progress } from './transport.ts';
export { MigrationOrderError, readMigrationFolder } from './migrations.ts';

export interface ClientOptions {
  /** The repo's URL (`http://acme.localhost:8080/web`), or the server's (`http://127.0.0.1:8080`) with `org` and `repo`. */
  url?: string;
  /** @deprecated the old name of `url` */
  baseUrl?: string;
  /** The organization: sent as the Host `{org}.{baseDomain}` when `url` does not already name it. */
  org?: string;
  /** The repo, when `url` has no path. */
  repo?: string;
  /** The org hosts' domain (BASE_DOMAIN), for `org`; default `localhost`. */
  baseDomain?: string;
  /** The repo's shared secret (`npx scopebase secret org/repo`). */
  secret: string;
  /** Default `main`. */
  database?: string;
  /** The longest one call may take, retries included (default 30 000 ms). */
  timeoutMs?: number;
  /** How often a refused call (429/503 with Retry-After) is tried again when that is safe (default 3). */
  retries?: number;
  /** Send with this fetch instead of node:http (edge runtimes, tests). It cannot set Host. */
  fetch?: typeof fetch;
}

export interface CallOptions { signal?: AbortSignal; timeoutMs?: number }
export interface Statement { sql: string; params?: Params }
export type Row = Record<string, Value>;
export interface ResultSet<T = Row> {
  columns: string[];
  /** Rows as objects keyed by column name (a later column of the same name wins). */
  rows: T[];
  /** Rows as arrays, in column order. */
  values: Value[][];
}
export interface WriteResult<T = Row> extends ResultSet<T> { rowsAffected: number; lastInsertRowid: number | bigint | null }
/** What an export tells beside its bytes: the version, and the last migration applied at it (none: absent). */
export interface ExportResult { version: number; lastMigration?: string }

export interface MigrateResult {
  applied: string[]; alreadyApplied: string[]; version: number; dryRun: boolean;
  /** With `baseline`: the migrations recorded as applied without running them (none when already recorded). */
  baselined?: string[];
}
/** `rows` is null when SQLite cannot count them (a full-text table whose `content=` table is gone): status still answers. */
export interface TableEntry { name: string; rows: number | null; virtual?: true; module?: string }
export interface Status {
  database: string; exists: boolean; version?: number; sizeBytes?: number;
  /** A virtual table (full-text index, R*Tree) is marked, with its module; its shadow tables are not listed. */
  tables?: TableEntry[];
  migrations?: { applied: number; latest: string | null };
  /** The oldest version restore can reach (SPEC 4.11); its fields null until history has a record; absent with history off (DB_HISTORY_DAYS=0). */
  history?: { oldestVersion: number | null; oldestTime: string | null };
  mirrors?: { name: string; deliveredVersion: number; pendingEvents: number; lastError: string | null }[];
  databases: string[];
  [more: string]: unknown;
}

interface WireSet { columns?: string[]; rows?: unknown[][]; rowsAffected?: number; lastInsertRowid?: unknown }

function toResultSet<T>(w: WireSet): ResultSet<T> {
  const columns = w.columns ?? [];
  const values = (w.rows ?? []).map((r) => r.map(decodeValue));
  const rows = values.map((r) => Object.fromEntries(columns.map((c, i) => [c, r[i]])) as T);
  return { columns, rows, values };
}

function toWriteResult<T>(w: WireSet): WriteResult<T> {
  return { ...toResultSet<T>(w), rowsAffected: w.rowsAffected ?? 0, lastInsertRowid: decodeValue(w.lastInsertRowid ?? null) as number | bigint | null };
}

function statementBody(s: Statement) {
  return s.params === undefined ? { sql: s.sql } : { sql: s.sql, params: encodeParams(s.params) };
}

/** Where requests go: the repo's base URL and the Host to send, if any. */
export function resolveTarget(opts: Pick<ClientOptions, 'url' | 'baseUrl' | 'org' | 'repo' | 'baseDomain'>): { base: URL; host: string | null } {
  const raw = opts.url ?? opts.baseUrl;
  if (!raw) throw new TypeError('createClient: `url` is required, e.g. http://acme.localhost:8080/web');
  const base = new URL(raw);
  const path = base.pathname.replace(/\/+$/, '');
  // The libSQL URL (…/web/_db/) is for libSQL clients; this client adds /_db/<op> itself.
  if (/\/_db$/.test(path)) throw new TypeError(`createClient: \`url\` is the repo's URL (${base.origin}${path.slice(0, -'/_db'.length)}), without /_db/: that one is for libSQL clients`);
  if (opts.repo && path !== '' && path !== `/${opts.repo}`) throw new TypeError(`createClient: \`url\` already names the repo ${path.slice(1)}; drop \`repo\` or the path`);
  if (!opts.repo && path === '') throw new TypeError('createClient: name the repo, in `url` (http://acme.localhost:8080/web) or as `repo`');
  base.pathname = opts.repo ? `/${opts.repo}` : path;
  const domain = (opts.baseDomain ?? 'localhost').toLowerCase();
  const hostname = base.hostname.toLowerCase();
  // An org host in url already says the org; otherwise org goes into Host.
  const host = opts.org && hostname !== `${opts.org.toLowerCase()}.${domain}` ? `${opts.org.toLowerCase()}.${domain}${base.port ? `:${base.port}` : ''}` : null;
  return { base, host };
}

const SAFE_TO_REPEAT = new Set(['query', 'status', 'changes', 'migrate', 'export']); // migrate: a repeat of an applied list changes nothing (SPEC 4.6)

export function createClient(opts: ClientOptions) {
  const { base, host } = resolveTarget(opts);
  // An unset environment variable is the usual cause: say so here, not as "wrong secret" from the server.
  if (typeof opts.secret !== 'string' || opts.secret === '') throw new TypeError('createClient: `secret` is required (the repo\'s secret: `npx scopebase secret org/repo`); is SCOPEBASE_SECRET set?');
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const retries = opts.retries ?? 3;
  let sender: Promise<Send> | null = opts.fetch ? Promise.resolve(fetchSender(opts.fetch)) : null;

  /** One operation: a JSON body (with the client's database), or `upload`, a raw body sent with its query string. */
  async function call<T>(op: string, body: Record<string, unknown>, co: CallOptions = {}, upload?: { body: string | Uint8Array | FileBody; contentType: string; query: string }, download?: { saveTo?: SaveTo }): Promise<T> {
    sender ??= defaultSender();
    const send = await sender;
    const timeout = AbortSignal.timeout(co.timeoutMs ?? timeoutMs);
    const signal = co.signal ? AbortSignal.any([co.signal, timeout]) : timeout;
    const url = new URL(`${base.pathname}/_db/${op}${upload ? `?${upload.query}` : ''}`, base);
    const headers: Record<string, string> = { authorization: `Bearer ${opts.secret}`, 'content-type': upload?.contentType ?? 'application/json', accept: 'application/json' };
    if (host) headers.host = host;
    const payload = upload ? upload.body : JSON.stringify({ ...(opts.database ? { database: opts.database } : {}), ...body });
    const stopped = () => (co.signal?.aborted ? errorFor(0, 'aborted', 'the call was aborted', undefined) : errorFor(0, 'timeout', `no answer within ${co.timeoutMs ?? timeoutMs} ms`, undefined));
    for (let attempt = 0; ; attempt++) {
      let reply;
      try {
        reply = await send({ url, headers, body: payload, signal, ...(download?.saveTo ? { saveTo: download.saveTo } : {}) });
      } catch (e) {
        if (signal.aborted) throw stopped();
        if (e instanceof NoReply) throw errorFor(0, 'network', `cannot reach ${url.origin}: ${e.causeCode ?? e.message}`, { sent: e.sent, cause: e.causeCode });
        throw e;
      }
      if (download && reply.status === 200) {
        const last = reply.headers['x-db-last-migration'];
        return { bytes: reply.bytes, size: reply.saved ?? reply.bytes.length, version: Number(reply.headers['x-db-version']), ...(last ? { lastMigration: last } : {}) } as T;
      }
      let json: { error?: { code?: string; message?: string; details?: Record<string, unknown> } } | null = null;
      try {
        json = JSON.parse(reply.body);
      } catch {
        json = null;
      }
      if (reply.status >= 200 && reply.status < 300 && json) return json as T;
      const err = json?.error;
      const error = errorFor(reply.status, err?.code ?? 'internal', err?.message ?? `HTTP ${reply.status} without a scopebase error body (is ${url.origin} a scopebase server?)`, err?.details, reply.headers['x-request-id']);
      const wait = retryDelayMs(reply.status, reply.headers['retry-after']);
      const safe = SAFE_TO_REPEAT.has(op) || error.details?.committed === false;
      if (wait === null || !safe || attempt >= retries) throw error;
      await sleep(wait, signal).catch(() => {
        throw stopped();
      });
    }
  }

  async function migrationList(list: Migration[] | string): Promise<Migration[]> {
    if (typeof list !== 'string') return list;
    const folder = await readMigrationFolder(list).catch((e: unknown) => {
      throw e instanceof MigrationOrderError ? errorFor(0, 'invalid_request', e.message) : e;
    });
    if (folder.migrations.length === 0) {
      const why = folder.skipped.map((s) => `${s.file}: ${s.reason}`).join('; ');
      throw errorFor(0, 'invalid_request', `no migration files (NNNN_name.sql) in ${list}${why ? ` (${why})` : ''}`);
    }
    return folder.migrations.map(({ id, sql }) => ({ id, sql }));
  }

  return {
    /** Reads (SPEC 4.3): one statement; rows typed as T. */
    async query<T = Row>(sql: string, params?: Params, co?: CallOptions): Promise<ResultSet<T> & { version: number }> {
      const r = await call<{ results: WireSet[]; version: number }>('query', statementBody({ sql, params }), co);
      return { ...toResultSet<T>(r.results[0] ?? {}), version: r.version };
    },
    /** Several reads of one snapshot. */
    async read(statements: Statement[], co?: CallOptions): Promise<{ results: ResultSet[]; version: number }> {
      const r = await call<{ results: WireSet[]; version: number }>('query', { statements: statements.map(statementBody) }, co);
      return { results: r.results.map((w) => toResultSet(w)), version: r.version };
    },
    /** One write (SPEC 4.4); rows (RETURNING) typed as T. */
    async execute<T = Row>(sql: string, params?: Params, co?: CallOptions): Promise<WriteResult<T> & { version: number }> {
      const r = await call<{ results: WireSet[]; version: number }>('execute', statementBody({ sql, params }), co);
      return { ...toWriteResult<T>(r.results[0] ?? {}), version: r.version };
    },
    /** Several writes as one transaction: all commit or none do. */
    async batch(statements: Statement[], co?: CallOptions): Promise<{ results: WriteResult[]; version: number }> {
      const r = await call<{ results: WireSet[]; version: number }>('execute', { statements: statements.map(statementBody) }, co);
      return { results: r.results.map((w) => toWriteResult(w)), version: r.version };
    },
    /** Applies a list, or a folder of NNNN_name.sql files (Node), in order (SPEC 4.6). */
    async migrate(list: Migration[] | string, mo: CallOptions & { dryRun?: boolean; baseline?: string } = {}): Promise<MigrateResult> {
      const baseline = mo.baseline === undefined ? {} : { baseline: mo.baseline };
      return call<MigrateResult>('migrate', { migrations: await migrationList(list), dryRun: mo.dryRun === true, ...baseline }, mo);
    },
    status(co?: CallOptions): Promise<Status> {
      return call<Status>('status', {}, co);
    },
    /** The change log (SPEC 4.9): the events after version `since`, oldest first, at most `limit` (a page ends sooner past ~32 MiB). */
    changes(since: number, co: CallOptions & { limit?: number } = {}): Promise<ChangesPage> {
      return call<ChangesPage>('changes', { since, ...(co.limit === undefined ? {} : { limit: co.limit }) }, co);
    },
    /** Time travel (SPEC 4.11): the database back to a version, or to the one in force at a time, as a new version. */
    restore(to: { toVersion: number } | { toTime: string | Date }, ro: CallOptions & { dryRun?: boolean } = {}): Promise<RestoreResult> {
      const target = 'toVersion' in to ? { toVersion: to.toVersion } : { toTime: to.toTime instanceof Date ? to.toTime.toISOString() : to.toTime };
      return call<RestoreResult>('restore', { ...target, dryRun: ro.dryRun === true }, ro);
    },
    /**
     * Export (SPEC 4.12): a consistent copy as a clean SQLite file or a SQL dump, with the version it holds and the
     * last migration applied then (for `migrate(…, { baseline })` after importing it elsewhere).
     */
    export(eo: CallOptions & { format?: 'sqlite' | 'sql' } = {}): Promise<ExportResult & { bytes: Uint8Array }> {
      return call('export', { format: eo.format ?? 'sqlite' }, eo, undefined, {});
    },
    /** Export straight into a file, streamed (Node): no size limit but the disk's; `onProgress` as bytes arrive. */
    async exportToFile(path: string, eo: CallOptions & { format?: 'sqlite' | 'sql'; onProgress?: Progress } = {}): Promise<ExportResult & { size: number }> {
      const r = await call<ExportResult & { size: number }>('export', { format: eo.format ?? 'sqlite' }, eo, undefined, { saveTo: { path, ...(eo.onProgress ? { onProgress: eo.onProgress } : {}) } });
      return { size: r.size, version: r.version, ...(r.lastMigration ? { lastMigration: r.lastMigration } : {}) };
    },
    /** Import (SPEC 4.12): a SQLite file or SQL text becomes the database's content, as one new version. */
    import(data: string | Uint8Array, io: CallOptions & { format?: 'sqlite' | 'sql'; mode?: 'create' | 'replace' } = {}): Promise<ImportResult> {
      const format = io.format ?? (typeof data === 'string' ? 'sql' : formatOf(data));
      const query = new URLSearchParams({ database: opts.database ?? 'main', mode: io.mode ?? 'create' }).toString();
      return call<ImportResult>('import', {}, io, { body: data, contentType: format === 'sql' ? 'application/sql' : 'application/vnd.sqlite3', query });
    },
    /** Import a file, streamed from disk (Node); its format is told from its first bytes unless given. */
    async importFile(path: string, io: CallOptions & { format?: 'sqlite' | 'sql'; mode?: 'create' | 'replace'; onProgress?: Progress } = {}): Promise<ImportResult & { format: 'sqlite' | 'sql' }> {
      const file = await describeFile(path);
      const format = io.format ?? file.format;
      const query = new URLSearchParams({ database: opts.database ?? 'main', mode: io.mode ?? 'create' }).toString();
      const body: FileBody = { path, size: file.size, ...(io.onProgress ? { onProgress: io.onProgress } : {}) };
      return { ...await call<ImportResult>('import', {}, io, { body, contentType: format === 'sql' ? 'application/sql' : 'application/vnd.sqlite3', query }), format };
    },
    /** The same repo, another database. */
    database(name: string) {
      return createClient({ ...opts, database: name });
    },
  };
}

export type Client = ReturnType<typeof createClient>;

/** A SQLite database file starts with `SQLite format 3\0`; anything else is taken for SQL text. */
export function formatOf(head: Uint8Array): 'sqlite' | 'sql' {
  const magic = 'SQLite format 3\0';
  for (let i = 0; i < magic.length; i++) if (head[i] !== magic.charCodeAt(i)) return 'sql';
  return 'sqlite';
}

/** A file's size, and its format told from its first bytes. */
async function describeFile(path: string): Promise<{ size: number; format: 'sqlite' | 'sql' }> {
  const { open } = await import('node:fs/promises');
  let f;
  try {
    f = await open(path, 'r');
  } catch (e) {
    throw errorFor(0, 'invalid_request', `cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  try {
    const head = new Uint8Array(16);
    await f.read(head, 0, 16, 0);
    return { size: (await f.stat()).size, format: formatOf(head) };
  } finally {
    await f.close();
  }
}

export interface RestoreResult { restoredTo: { version: number; committedAt: string | null }; version: number; dryRun: boolean }
export interface ImportResult { database: string; version: number; tables: TableEntry[] }
/** A change event (SPEC 5) as the change log keeps it: one per version. */
export interface ChangeEvent {
  id: string; type: 'database.changed' | 'database.migrated' | 'database.restored' | 'database.imported';
  org: string; repo: string; database: string; version: number; previousVersion: number;
  operation: 'execute' | 'migrate' | 'restore' | 'import'; committedAt: string;
  changes: { rowsAffected: number; tables: string[] };
  /** A SQLite session changeset in base64; null when none carries the change (a bulk write, a restore, an import). */
  changeset: string | null;
  /** A migrate's: the migrations it ran; `baselined`, those it recorded as applied without running them. */
  migrations?: { id: string; sql: string }[];
  baselined?: string[];
  /** A restore's: the version it brought back (SPEC 4.11). */
  restoredVersion?: number;
}
/** `version` is the database's current one. */
export interface ChangesPage { events: ChangeEvent[]; version: number }
export { ScopebaseError };

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
