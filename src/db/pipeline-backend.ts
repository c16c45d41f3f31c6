// SPEC 4.10: what the Hrana pipeline runs on, the reads and writes of 4.3 and 4.4 through the executor pool.
import { ApiError } from '../shared/errors.ts';
import type { Config } from '../shared/config.ts';
import type { Replication, Scope } from './contract.ts';
import type { ExecReply, ExecutorPool } from './executor/pool.ts';
import type { HranaBackend } from './hrana/index.ts';
import { validate } from './request.ts';

/** What of the service a pipeline needs. */
export interface PipelineParts {
  pool: ExecutorPool;
  replication: Replication | null;
  limits: Pick<Config['db'], 'maxStatements' | 'maxValueBytes' | 'transactionMaxMs' | 'maxResultBytes'>;
  exists(scope: Scope): boolean;
  reportBug(e: unknown): void;
  /** A write's reply once it is on the follower too (cluster mode). */
  replicated(scope: Scope, res: ExecReply): Promise<ExecReply>;
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
      // On a database that does not exist, a request that changes nothing (a read, PRAGMA user_version) leaves none:
      // as on Turso it reads as an empty one, and reads do not use up DB_MAX_DATABASES_PER_REPO.
      if (kind === 'write' && !parts.exists(scope)) body.transient = true;
      const raw = Buffer.from(JSON.stringify(body));
      if (kind === 'read' && !parts.exists(scope)) throw notFound(scope);
      const res = kind === 'read' ? await pool.read({ op: 'query', path }, raw) : await parts.replicated(scope, await pool.write(scope, path, 'execute', raw));
      if (res.status !== 200) throw replyError(res.body);
      return res.body.toString('utf8');
    },
    holdLane: async () => {
      const hold = await pool.holdLane(scope, path);
      if (replication === null) return hold;
      // In a cluster a COMMIT is answered once the follower holds it, as any other write.
      return {
        create: hold.create,
        release: () => hold.release(),
        run: async (header, body, budgetMs) => {
          const res = await hold.run(header, body, budgetMs);
          if (res.version !== undefined) await replication.replicated(scope, res.version);
          return res;
        },
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
    reportBug: parts.reportBug,
  };
}
