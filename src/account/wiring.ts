// `scopebase serve account`: the account service alone. (With the proxy: proxy/account-wiring.ts.)
import type { FastifyInstance } from 'fastify';
import type { Config } from '../shared/config.ts';
import type { ConnectionCap } from '../shared/connection-cap.ts';
import type { Logger } from '../shared/log.ts';
import { createAccountService, type AccountServiceOptions } from './service.ts';
import { createAccountServer } from './standalone.ts';

export type AccountTuning = Omit<AccountServiceOptions, 'config' | 'logger'>;

/** The URL of a sign-in provider this process runs itself (the development one), if any: the start banner prints it. */
export function devIdpUrlOf(providers: { address?: string }[]): string | undefined {
  return providers.find((p) => p.address !== undefined)?.address;
}

/** `scopebase serve account`: the account service on its own listener. */
export async function accountAlone(config: Config, logger: Logger, connections: ConnectionCap, tuning: AccountTuning = {}): Promise<{ server: FastifyInstance; devIdpUrl?: string; close(): Promise<void> }> {
  const service = await createAccountService({ config, logger, ...tuning });
  return { server: createAccountServer({ config, logger, service, connections }), devIdpUrl: devIdpUrlOf(service.providers), close: () => service.close() };
}
