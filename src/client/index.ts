// A small typed client for the database control API (SPEC 4), for app code and the CLI. Uses global fetch.

export type Value = null | number | string | { $bigint: string } | { $blob: string };
export type Params = Value[] | Record<string, Value | boolean>;
export interface Statement { sql: string; params?: Params }
export interface ReadResult { columns: string[]; rows: Value[][] }
export interface WriteResult { rowsAffected: number; lastInsertRowid: Value; columns?: string[]; rows?: Value[][] }
export interface Migration { id: string; sql: string }
export interface MigrateResult { applied: string[]; alreadyApplied: string[]; version: number; dryRun: boolean }

export class ScopebaseError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown> | undefined;
  constructor(status: number, code: string, message: string, details?: Record<string, unknown>) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export interface ClientOptions {
  /** The repo's base, e.g. https://acme.example.com/web */
  baseUrl: string;
  /** The repo's shared secret (`scopebase secret org/repo`). */
  secret: string;
  database?: string;
  /** Sent as the Host header when baseUrl is an address rather than the org host (Node's fetch ignores Host, so use undici for that case). */
  fetch?: typeof fetch;
}

export function createClient(opts: ClientOptions) {
  const base = opts.baseUrl.replace(/\/+$/, '');
  const doFetch = opts.fetch ?? fetch;
  async function call<T>(op: string, body: Record<string, unknown>): Promise<T> {
    const res = await doFetch(`${base}/_db/${op}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${opts.secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...(opts.database ? { database: opts.database } : {}), ...body }),
    });
    const json = (await res.json().catch(() => null)) as { error?: { code: string; message: string; details?: Record<string, unknown> } } | null;
    if (!res.ok) throw new ScopebaseError(res.status, json?.error?.code ?? 'internal', json?.error?.message ?? `HTTP ${res.status}`, json?.error?.details);
    return json as T;
  }
  return {
    query: (sql: string, params?: Params) => call<{ results: ReadResult[]; version: number }>('query', { sql, params }),
    batchQuery: (statements: Statement[]) => call<{ results: ReadResult[]; version: number }>('query', { statements }),
    execute: (sql: string, params?: Params) => call<{ results: WriteResult[]; version: number }>('execute', { sql, params }),
    batch: (statements: Statement[]) => call<{ results: WriteResult[]; version: number }>('execute', { statements }),
    migrate: (migrations: Migration[], dryRun = false) => call<MigrateResult>('migrate', { migrations, dryRun }),
    status: () => call<Record<string, unknown>>('status', {}),
  };
}
