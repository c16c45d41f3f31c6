// The follower's endpoints on `serve db` (only for nodes holding the proxy token): state, apply, snapshot.
import { createWriteStream, rmSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { chargeToProduct } from '../shared/body-budget.ts';
import { ApiError } from '../shared/errors.ts';
import { checkDatabase, checkOrg, checkRepo } from '../shared/names.ts';
import type { Scope } from '../db/contract.ts';
import { PROXY_TOKEN_HEADER } from '../db/remote.ts';
import type { DbService } from '../db/service.ts';
import { copyState, installSnapshot } from './follower-copy.ts';
import type { ClusterNode } from './node.ts';
import { scopeKey } from './placement.ts';

interface Target { key: string; scope: Scope; epoch: number }

export function registerFollowerRoutes(app: FastifyInstance, node: ClusterNode, db: DbService, tokens: string[]): void {
  const wanted = tokens.map((t) => Buffer.from(t));
  const target = (req: FastifyRequest): Target => {
    const given = Buffer.from(String(req.headers[PROXY_TOKEN_HEADER] ?? ''));
    if (!wanted.some((w) => w.length === given.length && timingSafeEqual(w, given))) throw new ApiError('forbidden', 'cluster endpoints only answer other nodes');
    const q = req.query as Record<string, string | undefined>;
    const scope = { org: checkOrg(q.org ?? ''), repo: checkRepo(q.repo ?? ''), database: checkDatabase(q.database) };
    const epoch = Number(q.epoch);
    if (!Number.isSafeInteger(epoch) || epoch <= 0) throw new ApiError('invalid_request', 'epoch must be a positive integer');
    return { key: scopeKey(scope), scope, epoch };
  };
  const jsonBody = (req: FastifyRequest): Record<string, unknown> => {
    try {
      const body = JSON.parse((req.body as Buffer | undefined)?.toString('utf8') ?? '');
      if (typeof body === 'object' && body !== null && !Array.isArray(body)) return body as Record<string, unknown>;
    } catch { /* said below */ }
    throw new ApiError('invalid_request', 'the body must be a JSON object');
  };
  // 410: the epoch is lower than one this node has seen (a newer primary exists); the sender must stop answering 200.
  const fenced = (t: Target) => new ApiError('gone', `epoch ${t.epoch} is older than this database's current one`);
  // On an executor (opening the copy parses the tenant's schema); one it cannot read is answered as none.
  const stateOf = async (t: Target) => {
    const state = await copyState(db, t.scope, node.applyBudgetMs);
    if (state.problem !== undefined) node.logger.warn({ database: t.key, problem: state.problem }, 'cluster: the copy could not be read; answered as none (the primary sends a snapshot)');
    return state;
  };

  // On the headers, before a body is read: another node's token, the scope and epoch; its body then counts in the
  // budget as the product's own (body-budget.ts), in no tenant's share: a refusal would fail writes already committed.
  const admitted = new WeakMap<FastifyRequest, Target>();
  const onRequest = async (req: FastifyRequest): Promise<void> => {
    const t = target(req);
    admitted.set(req, t);
    chargeToProduct(req.raw);
  };
  const targetOf = (req: FastifyRequest): Target => admitted.get(req) ?? target(req);

  app.post('/_cluster/state', { onRequest }, async (req) => {
    const t = targetOf(req);
    return node.serial(t.key, async () => {
      if (!node.acceptEpoch(t.key, t.epoch)) throw fenced(t);
      const { version, lastEventId } = await stateOf(t);
      // inLine: brought in line under this very epoch, so it holds only what this primary shipped (a primary whose
      // copy lacks it lost writes: src/cluster/shipper.ts BehindFollower), and may take the database over itself.
      return { version, lastEventId, inLine: node.inLineUnder(t.key, t.epoch) };
    });
  });

  // The primary found this copy to continue its own history at `version`: the copy may take over from this epoch.
  app.post('/_cluster/confirm', { onRequest }, async (req) => {
    const t = targetOf(req);
    const version = jsonBody(req).version;
    if (!Number.isSafeInteger(version)) throw new ApiError('invalid_request', 'version must be an integer');
    return node.serial(t.key, async () => {
      if (!node.acceptEpoch(t.key, t.epoch)) throw fenced(t);
      if ((await stateOf(t)).version !== version) return { problem: 'the copy moved' };
      node.markSynced(t.key, t.epoch, version as number);
      return { version };
    });
  });

  // The body (`{"events": [...]}`, up to a page of the tenant's changes) goes to the executor unparsed: it is parsed
  // there only. The mirror cursors travel in the query, as with a snapshot.
  app.post('/_cluster/apply', { onRequest, bodyLimit: 256 * 1024 * 1024 }, async (req) => {
    const t = targetOf(req);
    const cursors = mirrorCursors(jsonQuery((req.query as Record<string, string | undefined>).mirrors));
    return node.serial(t.key, async () => {
      if (!node.acceptEpoch(t.key, t.epoch)) throw fenced(t);
      if (cursors !== null) node.seedCursors(t.key, cursors);
      await node.releaseCopy(t.key);
      // On an executor under a time limit: the changesets run the tenant's CHECK, generated and index expressions.
      // Still in this database's queue (the fence, promotion), and answered only once committed (synchronous=FULL).
      const applied = await db.applyToCopy(t.scope, req.body as Buffer, node.applyBudgetMs);
      if ('problem' in applied) {
        if (applied.stopped) node.logger.warn({ database: t.key, problem: applied.problem }, 'cluster: applying a shipment was stopped; the primary sends a snapshot');
        return applied;
      }
      node.markSynced(t.key, t.epoch, applied.version);
      return { version: applied.version };
    });
  });

  // Mirror cursors without events (src/cluster/shipper.ts pushCursors): where this node's delivery resumes if it takes over.
  app.post('/_cluster/cursors', { onRequest }, async (req) => {
    const t = targetOf(req);
    const cursors = mirrorCursors(jsonBody(req).mirrors);
    if (cursors === null) throw new ApiError('invalid_request', 'mirrors must be an object of mirror name → non-negative integer version');
    return node.serial(t.key, () => {
      if (!node.acceptEpoch(t.key, t.epoch)) throw fenced(t);
      node.seedCursors(t.key, cursors);
      return {};
    });
  });

  app.register(async (scoped) => {
    scoped.addContentTypeParser('application/vnd.sqlite3', (_req, payload, done) => done(null, payload));
    scoped.post('/_cluster/snapshot', { onRequest }, async (req) => {
      const t = targetOf(req);
      if (typeof (req.body as Readable | undefined)?.pipe !== 'function') throw new ApiError('invalid_request', 'a snapshot is sent as application/vnd.sqlite3');
      const cursors = mirrorCursors(jsonQuery((req.query as Record<string, string | undefined>).mirrors));
      const received = join(db.temporaryDir, `received-${randomBytes(8).toString('hex')}.sqlite`);
      try {
        await pipeline(req.body as Readable, createWriteStream(received)); // inside: a sender cut off mid-file leaves no part of it
        return await node.serial(t.key, async () => {
          if (!node.acceptEpoch(t.key, t.epoch)) throw fenced(t);
          await node.forgetCopy(t.key); // every executor process, each time: they keep connections to copies they applied to
          const version = await installSnapshot(db, t.scope, received); // read on an executor: it parses the tenant's schema
          node.markSynced(t.key, t.epoch, version);
          if (cursors !== null) node.seedCursors(t.key, cursors);
          return { version };
        });
      } finally {
        rmSync(received, { force: true }); // renamed into place when installed: then nothing to remove
      }
    });
  });
}

/** The primary's mirror cursors shipped with events: absent, or an object of mirror name → acknowledged version. */
function mirrorCursors(value: unknown): Record<string, number> | null {
  if (value === undefined || value === null) return null;
  const bad = () => new ApiError('invalid_request', 'mirrors must be an object of mirror name → non-negative integer version');
  if (typeof value !== 'object' || Array.isArray(value)) throw bad();
  for (const v of Object.values(value)) if (!Number.isSafeInteger(v) || (v as number) < 0) throw bad();
  return value as Record<string, number>;
}

function jsonQuery(value: string | undefined): unknown {
  if (value === undefined) return undefined;
  try {
    return JSON.parse(value);
  } catch {
    throw new ApiError('invalid_request', 'mirrors must be a JSON object of mirror name → version');
  }
}
