// The account service: store, providers, sessions and rate limits behind one Fastify plugin (mounted at /:repo/_account).
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { Config } from '../shared/config.ts';
import { ApiError } from '../shared/errors.ts';
import { answerError } from '../shared/http.ts';
import type { Logger } from '../shared/log.ts';
import { checkRepo } from '../shared/names.ts';
import { CLEANUP_EVERY_MS, startSweeper } from '../shared/sweep.ts';
import type { SessionResolver } from './contract.ts';
import { credentialsPlugin } from './credentials/index.ts';
import { createProviders, type ProviderOptions, type SignInProvider } from './providers/index.ts';
import { pageRoutes } from './routes/page.ts';
import { sessionRoutes } from './routes/session.ts';
import { SignInLimits, signInRoutes } from './routes/sign-in.ts';
import { Sessions } from './sessions.ts';
import { AccountStore } from './store.ts';

/** The largest request body an account endpoint reads (a credential's value is at most 64 KiB as JSON). */
export const ACCOUNT_BODY_LIMIT = 1024 * 1024;

export interface AccountServiceOptions {
  config: Config;
  logger: Logger;
  github?: ProviderOptions['github'];
  /** How often expired rows are deleted (tests shorten it); CLEANUP_EVERY_MS by default. */
  cleanupEveryMs?: number;
}

export interface AccountService {
  plugin: FastifyPluginAsync;
  resolveSession: SessionResolver;
  sessions: Sessions;
  providers: SignInProvider[];
  close(): Promise<void>;
}

export async function createAccountService(opts: AccountServiceOptions): Promise<AccountService> {
  const { config } = opts;
  const logger = opts.logger.child({ service: 'account' });
  const store = new AccountStore(config.dataDir);
  let providers: SignInProvider[];
  try {
    providers = await createProviders(config, logger, { timeoutMs: config.account.providerTimeoutMs, github: opts.github });
  } catch (err) {
    store.close();
    throw err;
  }
  const sessions = new Sessions(store, config.account.sessionTtlMs);
  const limiter = new SignInLimits(config.account.loginRateLimit);
  const sweeper = startSweeper({
    everyMs: opts.cleanupEveryMs ?? CLEANUP_EVERY_MS, logger,
    steps: [
      { what: 'sessions', run: (now, limit) => store.deleteExpiredSessions(now, limit) },
      { what: 'pending sign-ins', run: (now, limit) => store.deleteExpiredPending(now, limit) },
    ],
  });

  const plugin: FastifyPluginAsync = async (app) => {
    // Its bodies are small (a credential is at most 64 KiB): behind the proxy too, not the database's DB_MAX_BODY_BYTES.
    app.addHook('onRoute', (route) => {
      route.bodyLimit ??= ACCOUNT_BODY_LIMIT;
    });
    // SPEC 2: a bad repo name is 400 invalid_name before anything else, unknown paths included.
    app.addHook('onRequest', async (req: FastifyRequest<{ Params: { repo?: string } }>) => {
      checkRepo(req.params.repo ?? '');
    });
    app.setNotFoundHandler((req: FastifyRequest<{ Params: { repo?: string } }>, reply) => {
      checkRepo(req.params.repo ?? '');
      return answerError(req, reply, new ApiError('not_found', `no account endpoint ${req.method} ${req.url.split('?')[0]!.slice(0, 200)}`));
    });
    // A session renewed during this request gets its cookie's lifetime extended too.
    app.addHook('onSend', async (req, reply, payload) => {
      const cookie = sessions.renewalCookie(req);
      if (cookie) reply.header('set-cookie', cookie);
      return payload;
    });
    await app.register(async (child) => signInRoutes(child, { providers, store, sessions, limiter, maxPendingLogins: config.account.maxPendingLogins }));
    await app.register(async (child) => sessionRoutes(child, { sessions }));
    await app.register(async (child) => pageRoutes(child, { sessions }));
    await app.register(credentialsPlugin, { resolveSession: sessions.resolve, config, logger, cleanupEveryMs: opts.cleanupEveryMs ?? CLEANUP_EVERY_MS, knownUser: (id) => store.hasUser(id) });
  };

  return {
    plugin, resolveSession: sessions.resolve, sessions, providers,
    async close() {
      await sweeper.stop();
      for (const p of providers) await p.close?.();
      store.close();
    },
  };
}
