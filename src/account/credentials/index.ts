// Plugin credential storage (SPEC 7.1): the routes, and the account page's section.
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { Config } from '../../shared/config.ts';
import type { Logger } from '../../shared/log.ts';
import { startSweeper } from '../../shared/sweep.ts';
import type { ResolvedSession, SessionResolver } from '../contract.ts';
import { registerRoutes } from './routes.ts';
import { renderSection } from './section.ts';
import { CredentialStore } from './store.ts';

export interface CredentialsOptions {
  resolveSession: SessionResolver;
  config: Config;
  logger: Logger;
  /** Whether a user id is one of the account store's (the runtime may store credentials only for those). */
  knownUser(id: string): boolean;
  /** How often audit rows past their retention are deleted. */
  cleanupEveryMs: number;
}

// credentialsSection only gets the request, so it finds the store of the Fastify context it was registered in:
// the plugin records its store on its parent (the account plugin) and the request's context is walked upwards.
const byContext = new WeakMap<object, CredentialStore>();
const openStores = new Set<CredentialStore>();

export const credentialsPlugin: FastifyPluginAsync<CredentialsOptions> = async (app, opts) => {
  // Opening checks that every stored record's key id is configured: the start stops here otherwise.
  const store = CredentialStore.open(opts.config.dataDir, opts.config.account.encryptionKeys);
  openStores.add(store);
  byContext.set(app, store);
  const parent = Object.getPrototypeOf(app) as object | null;
  if (parent) byContext.set(parent, store);
  const sweeper = startSweeper({ everyMs: opts.cleanupEveryMs, logger: opts.logger, steps: [{ what: 'credential audit rows', run: (now, limit) => store.deleteExpiredAudit(now, limit) }] });
  app.addHook('onClose', async () => {
    await sweeper.stop();
    openStores.delete(store);
    store.close();
  });
  registerRoutes(app, { store, config: opts.config, resolveSession: opts.resolveSession, knownUser: opts.knownUser });
  opts.logger.debug({ keyId: store.sealer.currentKeyId }, 'credential store open');
};

export function storeFor(req: FastifyRequest): CredentialStore {
  for (let o: object | null = req.server; o; o = Object.getPrototypeOf(o) as object | null) {
    const s = byContext.get(o);
    if (s) return s;
  }
  if (openStores.size === 1) return [...openStores][0]!;
  throw new Error('the credentials plugin is not registered in this server');
}

/** The account page's credentials section (escaped HTML) for the signed-in user in this repo. */
export async function credentialsSection(req: FastifyRequest, session: ResolvedSession, repo: string): Promise<string> {
  const store = storeFor(req);
  return renderSection(req, {
    repo,
    userId: session.user.id,
    credentials: store.list(session.org, repo, session.user.id),
    audit: store.audit(session.org, repo, session.user.id, 20),
  });
}
