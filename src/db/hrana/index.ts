// The libSQL remote protocol (SPEC 4.10): which paths are Hrana's, and a pipeline request from body to reply.
import { ApiError } from '../../shared/errors.ts';
import { parseJsonObject } from '../../shared/http.ts';
import { checkDatabase } from '../../shared/names.ts';
import { type HranaBackend, Pipeline } from './pipeline.ts';
import { Streams } from './streams.ts';
import { TxQuota } from './transaction.ts';

export type { HranaBackend, Statement } from './pipeline.ts';

/** `[{database}/]v2/pipeline` or `…/v3/pipeline` after `/{repo}/_db/` (v3 takes the same JSON requests). */
const PIPELINE = /^(?:([^/]+)\/)?v[23]\/pipeline$/;
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

export class Hrana {
  private readonly streams: Streams;
  private readonly transactions: TxQuota;

  constructor(idleMs: number, maxStreams: number, maxTransactions: number) {
    this.streams = new Streams(idleMs, maxStreams);
    this.transactions = new TxQuota(maxTransactions);
  }

  /** One pipeline request: its stream (by baton), every request run in order, and the next baton. */
  async pipeline(streamKey: string, backend: HranaBackend, raw: Buffer): Promise<string> {
    const body = parseJsonObject(raw);
    if (!Array.isArray(body.requests) || (body.baton !== undefined && body.baton !== null && typeof body.baton !== 'string')) {
      throw new ApiError('invalid_request', 'a pipeline request is {"baton": string | null, "requests": [...]}');
    }
    const state = this.streams.take(body.baton, streamKey);
    const { results, closed } = await new Pipeline(backend, state, this.transactions).run(body.requests);
    return `{"baton":${JSON.stringify(closed ? null : this.streams.keep(state))},"base_url":null,"results":[${results.join(',')}]}`;
  }

  close(): void {
    this.streams.close();
  }
}
