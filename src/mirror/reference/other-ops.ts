// POST /{repo}/_db/<anything but query> on the mirror: a write is refused as `read_only` (SPEC 6: a read replica),
// anything else is named as the primary's. Checked on the headers, in order names, secret, refusal: no body is read.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../../shared/errors.ts';
import { orgFromHost } from '../../shared/host.ts';
import { checkRepo } from '../../shared/names.ts';
import { repoSecretRefusal } from '../../shared/secrets.ts';
import { REPLICA_QUERY } from './query.ts';

/** The primary's operations that write (SPEC 4.4, 4.6, 4.11, 4.12). */
const WRITES: ReadonlySet<string> = new Set(['execute', 'migrate', 'restore', 'import']);

export function registerOtherOps(app: FastifyInstance, deps: { baseDomain: string; rootKeys: Buffer[] }): void {
  const refuse = async (req: FastifyRequest<{ Params: { repo: string; '*': string } }>) => {
    const org = orgFromHost(req.headers.host, deps.baseDomain, REPLICA_QUERY);
    const repo = checkRepo(req.params.repo);
    const refused = repoSecretRefusal(deps.rootKeys, org, repo, req.headers.authorization);
    if (refused) throw refused;
    const op = req.params['*'].slice(0, 60);
    if (WRITES.has(op)) {
      throw new ApiError('read_only', `this is a read replica (scopebase's reference mirror): it answers POST /${repo}/_db/query only; send /_db/${op} to the primary`);
    }
    throw new ApiError('not_found', `the reference mirror answers POST /${repo}/_db/query only; /_db/${op} is served by the primary`);
  };
  app.post<{ Params: { repo: string; '*': string } }>('/:repo/_db/*', { onRequest: refuse }, async () => {
    throw new ApiError('internal', 'unreachable: the request was refused on its headers');
  });
}
