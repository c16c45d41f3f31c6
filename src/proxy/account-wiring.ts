// How the proxy gets its account and apps plugins: the account service in-process, or forwarded to `serve account`.
// Proxy wiring lives in proxy/ (proxy → services): the account service never imports the proxy.
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { Config } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import type { RawReply } from '../shared/raw-route.ts';
import { createAppsPlugin } from './apps.ts';
import { createRemoteAccount } from './forward-account.ts';
import { createAccountService } from '../account/service.ts';
import { proxyToken } from '../account/standalone.ts';
import { verify } from '../account/routes/session.ts';
import { devIdpUrlOf, type AccountTuning } from '../account/wiring.ts';

export interface AccountForProxy {
  account: FastifyPluginAsync;
  apps: FastifyPluginAsync;
  /** In-process only: GET /verify for the proxy's raw route (forward auth is on every request of a protected app). */
  verify?: (view: FastifyRequest) => Promise<RawReply>;
  /** The development identity provider's URL when this process runs it (the start banner prints it). */
  devIdpUrl?: string;
  close(): Promise<void>;
}

/** For the proxy: the `account` and `apps` plugins, and what to close after the proxy stopped. */
export async function accountForProxy(config: Config, logger: Logger, tuning: AccountTuning = {}): Promise<AccountForProxy> {
  const base = { apps: config.apps, trustedProxies: config.trustedProxies, baseDomain: config.baseDomain, wsIdleTimeoutMs: config.appsWsIdleTimeoutMs, logger };
  if (config.services.accountUrl) {
    const remote = createRemoteAccount({ accountUrl: config.services.accountUrl, proxyToken: proxyToken(config.rootKeys[0]!), trustedProxies: config.trustedProxies });
    const apps = createAppsPlugin({ ...base, resolveSession: remote.resolveSession, signInReachable: remote.signInReachable, renewalCookie: remote.renewalCookie });
    return { account: remote.plugin, apps: apps.plugin, close: async () => { await apps.close(); await remote.close(); } };
  }
  const service = await createAccountService({ config, logger, ...tuning });
  const apps = createAppsPlugin({ ...base, resolveSession: service.resolveSession, renewalCookie: (req) => service.sessions.renewalCookie(req) });
  return {
    account: service.plugin, apps: apps.plugin, verify: (view) => verify(service.sessions, view), devIdpUrl: devIdpUrlOf(service.providers),
    close: async () => { await apps.close(); await service.close(); },
  };
}
