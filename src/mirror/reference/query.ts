// POST /{repo}/_db/query on the replica: SPEC 4.3 with the primary's sandbox, executor and encoding, plus "minVersion".
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { ExecutorPool } from '../../db/executor/pool.ts';
import { databaseOf, parseBody, validate } from '../../db/request.ts';
import { ApiError } from '../../shared/errors.ts';
import { checkRepo } from '../../shared/names.ts';
import { repoSecretRefusal } from '../../shared/secrets.ts';
import { chargeToRepo, refuseBeforeBody } from '../../shared/body-budget.ts';
import { orgFromHost, type HostExample } from '../../shared/host.ts';
import type { Scope } from '../../db/contract.ts';
import type { ReplicaSet } from './replicas.ts';

/** How long a read with minVersion waits for the replica to catch up before 503. */
export const MIN_VERSION_WAIT_MS = 5000;

export interface QueryDeps {
  baseDomain: string;
  rootKeys: Buffer[];
  maxStatements: number;
  /** DB_MAX_BODY_BYTES: a read's body is held to the primary's limit (413), not to the hook's larger one. */
  maxBodyBytes: number;
  pool: ExecutorPool;
  replicas: ReplicaSet;
}

/** The mirror serves no account page: its unknown_host message names what it does serve. */
export const REPLICA_QUERY: HostExample = { served: 'the mirror answers POST /{repo}/_db/query on each organization\'s host', path: '/web/_db/query', what: 'the replica of repo web in org acme' };

/** How long a read with minVersion waits for a hook before the replica pulls the source's change log itself. */
export const PULL_AFTER_MS = 1000;

/** Waits for the replica to reach `version`; past PULL_AFTER_MS without a hook bringing it, pulls it from the source. */
async function waitOrPull(replicas: ReplicaSet, scope: Scope, version: number): Promise<boolean> {
  if ((replicas.version(scope) ?? -1) >= version) return true;
  const pull = setTimeout(() => replicas.catchUp(scope, version), PULL_AFTER_MS);
  try {
    return await replicas.waitFor(scope, version, MIN_VERSION_WAIT_MS);
  } finally {
    clearTimeout(pull);
  }
}

export function registerQuery(app: FastifyInstance, deps: QueryDeps): void {
  // The host, the repo and the secret are checked on the headers: a stranger's large body is not read (docs/security.md).
  const secretChecked = new WeakSet<FastifyRequest>();
  const onRequest = async (req: FastifyRequest<{ Params: { repo: string } }>) => {
    const org = orgFromHost(req.headers.host, deps.baseDomain, REPLICA_QUERY);
    const repo = checkRepo(req.params.repo);
    if (!refuseBeforeBody(req.raw, repoSecretRefusal(deps.rootKeys, org, repo, req.headers.authorization))) return;
    secretChecked.add(req);
    chargeToRepo(req.raw, org, repo);
  };
  app.post<{ Params: { repo: string } }>('/:repo/_db/query', { onRequest, bodyLimit: deps.maxBodyBytes }, async (req, reply) => {
    const org = orgFromHost(req.headers.host, deps.baseDomain, REPLICA_QUERY);
    const repo = checkRepo(req.params.repo);
    const body = parseBody('query', Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0));
    const database = databaseOf(body);
    // A refused caller's small body was read so that its names are answered first (SPEC 2); then its refusal.
    const refused = secretChecked.has(req) ? null : repoSecretRefusal(deps.rootKeys, org, repo, req.headers.authorization);
    if (refused) throw refused;
    const minVersion = body.minVersion;
    delete body.minVersion;
    if (minVersion !== undefined && (typeof minVersion !== 'number' || !Number.isSafeInteger(minVersion) || minVersion < 0)) {
      throw new ApiError('invalid_request', '"minVersion" must be a whole number ≥ 0');
    }
    validate('query', body, deps.maxStatements);
    const scope = { org, repo, database };
    // Its version, read in an executor on first use; a database this mirror never heard of is taken from the source.
    if ((await deps.replicas.follow(scope)) === null) throw new ApiError('database_not_found', `database ${database} does not exist (the source of this mirror has none)`);
    if (typeof minVersion === 'number' && !(await waitOrPull(deps.replicas, scope, minVersion))) {
      const at = deps.replicas.version(scope);
      throw new ApiError('unavailable', `the replica has not reached version ${minVersion} yet (it is at ${at ?? 'nothing'})`, { minVersion, version: at }, { 'retry-after': '1' });
    }
    const payload = Buffer.from(JSON.stringify(body));
    for (let attempt = 0; ; attempt++) {
      const replica = deps.replicas.get(scope);
      if (replica === null) throw new ApiError('database_not_found', `this mirror has no replica of ${database}`);
      const res = await deps.pool.read({ op: 'query', path: replica.path }, payload);
      // A 404 while a bootstrap swapped generations: read again from the new file.
      if (res.status === 404 && attempt === 0 && deps.replicas.get(scope)?.path !== replica.path) continue;
      return reply.code(res.status).type('application/json; charset=utf-8').send(res.body);
    }
  });
}
