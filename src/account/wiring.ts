// `scopebase serve account`: the account service alone. (With the proxy: proxy/account-wiring.ts.)
import type { FastifyInstance } from 'fastify';
import type { Config } from '../shared/config.ts';
import type { ConnectionCap } from '../shared/connection-cap.ts';
import type { Logger } from '../shared/log.ts';
import { createAccountService, type AccountServiceOptions } from './service.ts';
import { createAccountServer } from './standalone.ts';

export type AccountTuning = Omit<AccountServiceOptions, 'config' | 'logger'>;

/** `scopebase serve account`: the account service on its own listener. */
export async function accountAlone(config: Config, logger: Logger, connections: ConnectionCap, tuning: AccountTuning = {}): Promise<{ server: FastifyInstance; close(): Promise<void> }> {
  const service = await createAccountService({ config, logger, ...tuning });
  return { server: createAccountServer({ config, logger, service, connections }), close: () => service.close() };
}
