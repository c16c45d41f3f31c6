// The libSQL remote protocol (SPEC 4.10): which paths are Hrana's, and a pipeline request from body to reply.
import { ApiError } from '../../shared/errors.ts';
import { parseJsonObject } from '../../shared/http.ts';
import { checkDatabase } from '../../shared/names.ts';
import { type HranaBackend, Pipeline } from './pipeline.ts';
import { SqlBudget, Streams } from './streams.ts';
import { TxQuota } from './transaction.ts';
import { cursorBody } from './cursor.ts';

export type { HranaBackend, Statement } from './pipeline.ts';

/** `[{database}/]v2/pipeline`, `…/v3/pipeline` (the same JSON requests) or `…/v3/cursor` after `/{repo}/_db/`. */
const PIPELINE = /^(?:([^/]+)\/)?(?:v[23]\/pipeline|v3\/cursor)$/;

/** Whether a pipeline op is v3's cursor endpoint. */
export const isCursor = (op: string): boolean => op.endsWith('v3/cursor');
/** `[{database}/]v2` or `…/v3`: the version probe, answered 200 by the proxy. */
const VERSION_PROBE = /^(?:([^/]+)\/)?v[23]$/;

/** The database a Hrana pipeline op names (`main` when none), or null when the op is not one. */
export function pipelineDatabase(op: string): string | null {
  const m = PIPELINE.exec(op);
  if (!m) return null;
  return checkDatabase(m[1] ?? 'main');
}

/** The database a version probe names (`main` when none; SPEC 2: a bad name is 400), or null when the op is not one. */
export function probeDatabase(op: string): string | null {
  const m = VERSION_PROBE.exec(op);
  return m ? checkDatabase(m[1] ?? 'main') : null;
}

const isBaton = (b: unknown): boolean => b === undefined || b === null || typeof b === 'string';

/**
 * Requests one pipeline may hold. Each answer costs ~100–700 bytes even when nothing runs: without a bound, 32 MiB of
 * `{}` made 10 million error results: 136 s of one core, 3.8 GB held, then a 500 (docs/security.md).
 */
export const MAX_PIPELINE_REQUESTS = 10_000;

export interface HranaLimits {
  /** DB_STREAM_IDLE_MS, DB_MAX_STREAMS, DB_MAX_TRANSACTIONS. */
  streamIdleMs: number;
  maxStreams: number;
  maxTransactions: number;
  /** DB_STORED_SQL_MAX_BYTES_PER_REPO and DB_STORED_SQL_MAX_BYTES: what streams' stored SQL may count as. */
  storedSqlMaxBytesPerRepo: number;
  storedSqlMaxBytes: number;
}

export class Hrana {
  private readonly streams: Streams;
  private readonly transactions: TxQuota;

  constructor(limits: HranaLimits) {
    this.streams = new Streams(limits.streamIdleMs, limits.maxStreams, new SqlBudget(limits.storedSqlMaxBytesPerRepo, limits.storedSqlMaxBytes));
    this.transactions = new TxQuota(limits.maxTransactions);
    this.transactions.makeRoom = (repo) => this.streams.freeTransaction(repo, limits.maxTransactions);
  }

  /** One pipeline request: its stream (by baton), every request run in order, and the next baton. */
  async pipeline(streamKey: string, backend: HranaBackend, raw: Buffer): Promise<string> {
    const body = parseJsonObject(raw);
    if (!Array.isArray(body.requests) || !isBaton(body.baton)) {
      throw new ApiError('invalid_request', 'a pipeline request is {"baton": string | null, "requests": [...]}');
    }
    if (body.requests.length > MAX_PIPELINE_REQUESTS) {
      throw new ApiError('payload_too_large', `a pipeline holds at most ${MAX_PIPELINE_REQUESTS} requests, got ${body.requests.length}; nothing of it ran: send them in several pipelines`);
    }
    const done = await this.run(streamKey, backend, body.baton, body.requests);
    return `{"baton":${JSON.stringify(done.baton)},"base_url":null,"results":[${done.results.join(',')}]}`;
  }

  /** One v3/cursor request: `{"baton", "batch"}`, run as a pipeline's batch request, its result as cursor entries. */
  async cursor(streamKey: string, backend: HranaBackend, raw: Buffer): Promise<string> {
    const body = parseJsonObject(raw);
    if (typeof body.batch !== 'object' || body.batch === null || !isBaton(body.baton)) {
      throw new ApiError('invalid_request', 'a cursor request is {"baton": string | null, "batch": {"steps": [...]}}');
    }
    const done = await this.run(streamKey, backend, body.baton, [{ type: 'batch', batch: body.batch }]);
    return cursorBody(done.baton, done.results[0]!);
  }

  /** Runs requests on the stream a baton names (a new one for none); returns each result's JSON and the next baton. */
  private async run(streamKey: string, backend: HranaBackend, baton: unknown, requests: unknown[]): Promise<{ baton: string | null; results: string[] }> {
    const state = this.streams.take(baton, streamKey);
    let closed = true; // a pipeline that throws ends its stream: nothing will name it again
    try {
      const done = await new Pipeline(backend, state, this.transactions).run(requests);
      closed = done.closed;
      return { baton: closed ? null : this.streams.keep(state), results: done.results };
    } finally {
      if (closed) {
        state.tx?.abandon('its pipeline failed'); // a 'close' request has ended it already
        state.tx = null;
        state.release(); // its stored SQL no longer counts against the repo's and the server's budgets
      }
    }
  }

  close(): void {
    this.streams.close();
  }
}
