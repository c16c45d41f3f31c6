// What a database request's line and headers decide, before its body is read (docs/security.md, "Request bodies"):
// the operation, a database named in the path (SPEC 2: names before authentication), then the repo secret (SPEC 4.1).
// The proxy asks it on its routes; `serve db` again behind the proxy token; the service (DbService) only when no route
// did (DbRequest.authenticated).
import type { IncomingMessage } from 'node:http';
import { Counter } from 'prom-client';
import { chargeToRepo, refuseBeforeBody } from '../shared/body-budget.ts';
import { ApiError } from '../shared/errors.ts';
import { metrics } from '../shared/metrics.ts';
import { repoSecretRefusal } from '../shared/secrets.ts';
import { OPS } from '../shared/db-ops.ts';
import { pipelineDatabase } from './hrana/index.ts';

/** Every answer is counted, refusals on the headers too (by the process that gave them: the proxy, `serve db`). */
export const dbRequests = new Counter({ name: 'scopebase_db_requests_total', help: 'Database control requests by operation and status', labelNames: ['op', 'status'], registers: [metrics] });

/** The operation's label: an unknown op is one label value, so a client cannot grow the series. */
export function opLabel(op: string, upload: boolean): string {
  if (OPS.has(op) || (op === 'import' && upload)) return op;
  try {
    return pipelineDatabase(op) !== null ? 'pipeline' : 'unknown';
  } catch {
    return 'pipeline'; // a bad database name in the path: answered 400 by the route
  }
}

/** An operation of SPEC 4 (import included) or a libSQL pipeline path. */
export function isDbOperation(op: string): boolean {
  return OPS.has(op) || op === 'import' || pipelineDatabase(op) !== null;
}

export function unknownOperation(op: string): ApiError {
  return new ApiError('not_found', `unknown operation /_db/${op.slice(0, 40)}; use status, migrate, query, execute, restore, import, export, changes or snapshot`);
}

/** Throws for an unknown operation or a bad database name in the path; else the 401 to answer (null: the secret is right). */
export function admitDb(rootKeys: readonly Buffer[], org: string, repo: string, op: string, authorization: string | undefined): ApiError | null {
  if (!isDbOperation(op)) throw unknownOperation(op);
  return repoSecretRefusal(rootKeys, org, repo, authorization);
}

/**
 * On the headers of /_db/{op} (the proxy's raw and Fastify routes, `serve db`), after the org and repo: true when the
 * secret is right (the body then counts against the budget, in the repo's share), false when a small body is read
 * before the refusal; throws the refusal to send at once.
 */
export function admitDbHeaders(req: IncomingMessage, rootKeys: readonly Buffer[], org: string, repo: string, op: string): boolean {
  try {
    const admitted = refuseBeforeBody(req, admitDb(rootKeys, org, repo, op, req.headers.authorization));
    if (admitted) chargeToRepo(req, org, repo);
    return admitted;
  } catch (e) {
    if (e instanceof ApiError) dbRequests.inc({ op: opLabel(op, false), status: e.status });
    throw e;
  }
}
