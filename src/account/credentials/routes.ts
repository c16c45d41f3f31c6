// SPEC 7.1 routes, mounted inside the account plugin (prefix /:repo/_account).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { chargeToRepo } from '../../shared/body-budget.ts';
import type { Config } from '../../shared/config.ts';
import { ApiError } from '../../shared/errors.ts';
import { parseJsonObject } from '../../shared/http.ts';
import { checkRepo, safeDecode } from '../../shared/names.ts';
import { repoSecretRefusal } from '../../shared/secrets.ts';
import type { ResolvedSession, SessionResolver } from '../contract.ts';
import { assertSameSite } from '../same-site.ts';
import { checkCredentialName, checkExpiresAt, checkUserId, formValue, isExpired, parseForm, parsePutBody, type FormInput } from './input.ts';
import { SealError, type Identity } from './seal.ts';
import type { Actor, CredentialStore, CredentialValue } from './store.ts';

export const RUNTIME_ACTOR = 'runtime';

type Params = { repo: string; plugin?: string; name?: string; '*'?: string };
type Req = FastifyRequest<{ Params: Params; Querystring: Record<string, unknown> }>;

interface Deps {
  store: CredentialStore;
  config: Config;
  resolveSession: SessionResolver;
  knownUser(id: string): boolean;
}

/** Who is calling: the runtime (Bearer secret of this repo, acting for ?user=) or a user with a session. */
type Caller = { kind: 'runtime'; user: string } | { kind: 'user'; user: string; session: ResolvedSession };

function unauthorized(message: string): ApiError {
  return new ApiError('unauthorized', message, undefined, { 'www-authenticate': 'Bearer' });
}

function checkRuntime(req: Req, config: Config, repo: string): void {
  const refusal = repoSecretRefusal(config.rootKeys, req.org, repo, req.headers.authorization);
  if (refusal !== null) throw refusal;
  chargeToRepo(req.raw, req.org, repo); // the secret holder's body counts in its repo's share (body-budget.ts)
}

async function requireSession(req: Req, resolve: SessionResolver): Promise<ResolvedSession> {
  const session = await resolve(req);
  if (!session || session.org !== req.org) throw new ApiError('unauthenticated', 'sign in first: no valid session for this organization');
  return session;
}

/** The runtime form is chosen by an Authorization header or a ?user= parameter; otherwise it is the user's own session. */
async function caller(req: Req, deps: Deps, repo: string, write: boolean): Promise<Caller> {
  if (req.headers.authorization !== undefined || req.query.user !== undefined) {
    checkRuntime(req, deps.config, repo);
    return { kind: 'runtime', user: checkUserId(req.query.user) };
  }
  const session = await requireSession(req, deps.resolveSession);
  if (write) assertSameSite(req);
  return { kind: 'user', user: session.user.id, session };
}

function actor(req: Req, c: Caller): Actor {
  return { actor: c.kind === 'runtime' ? RUNTIME_ACTOR : c.user, requestId: req.id };
}

/** Names first (SPEC 2: before authentication). */
function target(req: Req): { repo: string; plugin: string; name: string } {
  const repo = checkRepo(req.params.repo);
  return { repo, plugin: checkCredentialName('plugin', req.params.plugin), name: checkCredentialName('name', req.params.name) };
}

function opened<T>(req: Req, id: Identity, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof SealError) {
      req.log.error({ credential: { repo: id.repo, plugin: id.plugin, name: id.name }, reason: e.reason }, 'a stored credential could not be opened');
      throw new ApiError('internal', 'the stored credential could not be opened (it was altered or its key is missing); the operator has the details in the log');
    }
    throw e;
  }
}

function put(req: Req, deps: Deps, id: Identity, value: CredentialValue, expiresAt: string | null, by: Actor) {
  const out = deps.store.put(id, value, expiresAt, by);
  req.log.info({ credential: { repo: id.repo, plugin: id.plugin, name: id.name }, action: out.created ? 'create' : 'replace', actor: by.actor === RUNTIME_ACTOR ? RUNTIME_ACTOR : 'user' }, 'credential stored');
  return out;
}

function remove(req: Req, deps: Deps, id: Identity, by: Actor): void {
  if (!deps.store.delete(id, by)) throw new ApiError('not_found', `no credential ${id.plugin}/${id.name}`);
  req.log.info({ credential: { repo: id.repo, plugin: id.plugin, name: id.name }, action: 'delete', actor: by.actor === RUNTIME_ACTOR ? RUNTIME_ACTOR : 'user' }, 'credential deleted');
}

/** Where a form post goes back to: the account page, with a status the page shows from a fixed list. */
export function accountPage(repo: string, query: string): string {
  return `/${repo}/_account/${query ? `?${query}` : ''}`;
}

/** A form post, its session and same-site check already passed on the headers (admitForm). */
async function handleForm(req: Req, reply: FastifyReply, deps: Deps, session: ResolvedSession): Promise<FastifyReply> {
  const repo = checkRepo(req.params.repo);
  const input: FormInput = parseForm(req.headers['content-type'], req.body);
  let stage: 'form' | 'expiry' | 'store' = 'form';
  let names = '';
  try {
    const plugin = checkCredentialName('plugin', req.params.plugin ?? input.plugin);
    const name = checkCredentialName('name', req.params.name ?? input.name);
    const id: Identity = { org: req.org, repo, user: session.user.id, plugin, name };
    const by = { actor: session.user.id, requestId: req.id };
    if (input.method === 'delete') {
      remove(req, deps, id, by);
      return reply.code(303).header('location', accountPage(repo, 'credentials=deleted')).header('cache-control', 'no-store').send();
    }
    names = `&plugin=${plugin}&name=${name}`; // checked names only: the page fills them in again, and nothing else
    const value = formValue(input);
    stage = 'expiry';
    const expires = input.expiresAt === null ? null : checkExpiresAt(input.expiresAt);
    stage = 'store';
    const out = put(req, deps, id, value, expires, by);
    return reply.code(303).header('location', accountPage(repo, `credentials=${out.created ? 'created' : 'replaced'}`)).header('cache-control', 'no-store').send();
  } catch (e) {
    if (e instanceof ApiError && e.status < 500) {
      // Which part of the form was wrong, as a fixed key the page words (the message itself is never echoed).
      const problem = (e.details as { problem?: string } | undefined)?.problem;
      const part = stage === 'expiry' ? '&problem=expiry' : problem === 'json' || problem === 'object' || problem === 'missing' || problem === 'deep' ? `&problem=value_${problem}` : '';
      const kind = input.type === 'json' ? '&type=json' : ''; // the page keeps "JSON object" chosen for the corrected value
      return reply.code(303).header('location', accountPage(repo, `credentials_error=${e.code}${part}${names}${kind}`)).header('cache-control', 'no-store').send();
    }
    throw e;
  }
}

export function registerRoutes(app: FastifyInstance, deps: Deps): void {
  app.addHook('onSend', async (_req, reply) => {
    reply.header('cache-control', 'no-store');
  });

  // Who calls is decided on the headers, before the body is read (docs/security.md, "Request bodies"): names, then
  // the runtime's secret or the user's session and same-site check. A stranger's body is never read.
  const callers = new WeakMap<FastifyRequest, Caller>();
  const admitWrite = async (req: Req) => {
    const { repo } = target(req);
    callers.set(req, await caller(req, deps, repo, true));
  };
  const sessions = new WeakMap<FastifyRequest, ResolvedSession>();
  const admitForm = async (req: Req) => {
    checkRepo(req.params.repo);
    // Names in the path come from the page itself: a bad one is a bad request, not a form mistake.
    if (req.params.plugin !== undefined) target(req);
    sessions.set(req, await requireSession(req, deps.resolveSession));
    assertSameSite(req);
  };
  const formHandler = (req: Req, reply: FastifyReply) => handleForm(req, reply, deps, sessions.get(req)!);

  app.get('/credentials', async (req: Req) => {
    const repo = checkRepo(req.params.repo);
    const session = await requireSession(req, deps.resolveSession);
    return { credentials: deps.store.list(req.org, repo, session.user.id) };
  });

  app.get('/credentials/:plugin/:name', async (req: Req) => {
    const { repo, plugin, name } = target(req);
    if (req.headers.authorization === undefined && req.query.user === undefined) {
      // Values are never readable with the cookie alone: a signed-in user is a valid caller that may not do this.
      const session = await deps.resolveSession(req);
      if (session && session.org === req.org) throw new ApiError('forbidden', 'credential values are only readable by the runtime with the repo\'s secret; GET /credentials lists yours');
      throw unauthorized('this call needs the repo\'s secret: Authorization: Bearer <secret>');
    }
    checkRuntime(req, deps.config, repo);
    const user = checkUserId(req.query.user);
    const id: Identity = { org: req.org, repo, user, plugin, name };
    const meta = deps.store.meta(id);
    if (!meta) throw new ApiError('not_found', `no credential ${plugin}/${name} for this user`);
    if (isExpired(meta.expiresAt)) throw new ApiError('not_found', `the credential ${plugin}/${name} expired at ${meta.expiresAt}`);
    const got = opened(req, id, () => deps.store.read(id, { actor: RUNTIME_ACTOR, requestId: req.id }));
    if (!got) throw new ApiError('not_found', `no credential ${plugin}/${name} for this user`);
    return { plugin, name, value: got.value, expiresAt: got.meta.expiresAt };
  });

  app.put('/credentials/:plugin/:name', { onRequest: admitWrite }, async (req: Req, reply) => {
    const { repo, plugin, name } = target(req);
    const c = callers.get(req)!;
    const { value, expiresAt } = parsePutBody(parseJsonObject(req.body));
    // A typo in ?user= would otherwise store a credential nobody can ever list, replace or delete from the page.
    if (c.kind === 'runtime' && !deps.knownUser(c.user)) throw new ApiError('not_found', 'no user with this id (?user=) has signed in: a credential is stored for a user the account service knows');
    const out = put(req, deps, { org: req.org, repo, user: c.user, plugin, name }, value, expiresAt, actor(req, c));
    return reply.code(out.created ? 201 : 200).send(out.meta);
  });

  app.delete('/credentials/:plugin/:name', { onRequest: admitWrite }, async (req: Req, reply) => {
    const { repo, plugin, name } = target(req);
    const c = callers.get(req)!;
    remove(req, deps, { org: req.org, repo, user: c.user, plugin, name }, actor(req, c));
    return reply.code(204).send();
  });

  // Plain HTML forms (no JavaScript) can only POST: _method=put|delete, then 303 back to the account page.
  app.post('/credentials/form', { onRequest: admitForm }, formHandler);
  app.post('/credentials/:plugin/:name', { onRequest: admitForm }, formHandler);

  // Anything else under /credentials/: a name with a slash, an over-long name, or a method this path does not take.
  // It always refuses, on the path alone: before the body is read.
  const badPath = async (req: Req) => {
    checkRepo(req.params.repo);
    // Split the path as sent, then decode: `gh%2Ftoken` is one segment, a plugin "gh/token", not a plugin and a name.
    const raw = /\/_account\/credentials\/([^?]*)/.exec(req.url)?.[1] ?? req.params['*'] ?? '';
    const parts = raw.split('/').map(safeDecode);
    checkCredentialName('plugin', parts[0]);
    if (parts.length > 1) checkCredentialName('name', parts[1]);
    if (parts.length !== 2) throw new ApiError('invalid_name', 'the path is /credentials/{plugin}/{name}: plugin and name may not contain "/"');
    throw new ApiError('not_found', `${req.method} is not a method of /credentials/{plugin}/{name}`);
  };
  app.all('/credentials/*', { onRequest: badPath }, badPath);
}
