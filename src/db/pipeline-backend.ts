// SPEC 4.10: what the Hrana pipeline runs on, the reads and writes of 4.3 and 4.4 through the executor pool; and an
// executor's reply as every endpoint's response or error.
import { ApiError } from '../shared/errors.ts';
import type { Config } from '../shared/config.ts';
import type { DbResponse, Replication, Scope } from './contract.ts';
import type { ExecReply, ExecutorPool, LaneHold } from './executor/pool.ts';
import type { HranaBackend } from './hrana/index.ts';
import { validate } from './request.ts';

/** What of the service a pipeline needs. */
export interface PipelineParts {
  pool: ExecutorPool;
  replication: Replication | null;
  limits: Pick<Config['db'], 'maxStatements' | 'maxValueBytes' | 'transactionMaxMs' | 'maxResultBytes' | 'maxBodyBytes'>;
  exists(scope: Scope): boolean;
  reportBug(e: unknown): void;
  /** A write's reply once it is on the follower too (cluster mode); a lost reply's `committed: true` too. */
  replicated(scope: Scope, write: Promise<ExecReply>): Promise<ExecReply>;
}

export const JSON_TYPE = 'application/json; charset=utf-8';

/** An executor's reply (its body JSON already) as the service's response. */
export function json(res: ExecReply): DbResponse {
  return { status: res.status, headers: { 'content-type': JSON_TYPE }, body: res.body };
}

/** An executor's error reply (SPEC 3's shape) as the error it stands for. */
export function replyError(body: Buffer): ApiError {
  const { error } = JSON.parse(body.toString('utf8'));
  return new ApiError(error.code, error.message, error.details);
}

export function notFound(scope: Scope): ApiError {
  return new ApiError('database_not_found', `database ${JSON.stringify(scope.database)} does not exist in ${scope.org}/${scope.repo}; /_db/execute or /_db/migrate creates it`);
}

export function pipelineBackend(scope: Scope, path: string, parts: PipelineParts): HranaBackend {
  const { pool, replication, limits } = parts;
  return {
    run: async (kind, statements, { foreignKeysOff, maxResultBytes } = {}) => {
      const body: Record<string, unknown> = { database: scope.database, statements };
      validate(kind === 'read' ? 'query' : 'execute', body, limits.maxStatements, limits.maxValueBytes);
      body.rows = 'hrana'; // after validate, as foreignKeysOff and maxResultBytes: no client can send them
      if (foreignKeysOff && kind === 'write') body.foreignKeysOff = true;
      if (maxResultBytes !== undefined) body.maxResultBytes = maxResultBytes;
      const missing = !parts.exists(scope);
      if (kind === 'read' || missing) {
        // A database that does not exist reads as an empty one, as on Turso. What only reads (a read, PRAGMA
        // user_version, a batch of them) is answered on an empty database in memory: no file, no write lane,
        // nothing of DB_MAX_DATABASES_PER_REPO and, in a cluster, no claim of its placement.
        const res = await pool.read({ op: 'query', path }, Buffer.from(JSON.stringify({ ...body, asEmpty: true })));
        if (res.status === 200) return res.body.toString('utf8');
        // A read refused as a write (read_only) is run as one by the pipeline; a write runs as one below, where its
        // own answer (a sandbox's write mode allows what its read mode refuses) is the one that counts.
        if (kind === 'read') throw replyError(res.body);
      }
      // It may create the database: in a cluster this claims its placement (admit). It creates it only if it changes
      // it (`transient`): a write that fails, or changes nothing, leaves none.
      if (missing) body.transient = true;
      if (replication !== null) await replication.admit(scope, true);
      try {
        const res = await parts.replicated(scope, pool.write(scope, path, 'execute', Buffer.from(JSON.stringify(body))));
        if (res.status !== 200) throw replyError(res.body);
        return res.body.toString('utf8');
      } finally {
        await replication?.settled(scope); // a failed first write gives its placement back once idle (src/cluster/claims.ts)
      }
    },
    holdLane: async (readOnly) => {
      // A read-only transaction is a snapshot: no lane, no claim of placement, no file made (SPEC 4.10).
      if (readOnly) return pool.pinReader(scope, path);
      // BEGIN may create the database (its first write inside): admitted, and in a cluster placed, as a write.
      if (replication === null) return pool.holdLane(scope, path);
      await replication.admit(scope, true);
      let hold: LaneHold;
      try {
        hold = await pool.holdLane(scope, path);
      } catch (e) {
        await replication.settled(scope);
        throw e;
      }
      // In a cluster a COMMIT is answered once the follower holds it, as any other write; a transaction that made
      // nothing of a new database gives its placement back once idle after it ends, as a failed first write does.
      let settled = false;
      return {
        create: hold.create,
        release: () => {
          hold.release();
          if (!settled) void replication.settled(scope);
          settled = true;
        },
        run: (header, body, budgetMs) => parts.replicated(scope, hold.run(header, body, budgetMs)),
      };
    },
    describe: async (sql) => {
      const res = await pool.read({ op: 'query', path }, Buffer.from(JSON.stringify({ describe: sql }))); // never a client's field
      if (res.status !== 200) throw replyError(res.body);
      return JSON.parse(res.body.toString('utf8'));
    },
    transactionMaxMs: limits.transactionMaxMs,
    maxStatements: limits.maxStatements,
    maxResultBytes: limits.maxResultBytes,
    maxBodyBytes: limits.maxBodyBytes,
    reportBug: parts.reportBug,
  };
}
