// `scopebase start` (every part in one process) and `scopebase serve <part>` (one part alone).
import type { FastifyInstance } from 'fastify';
import { loadConfig, type Config } from '../shared/config.ts';
import { createLogger, type Logger } from '../shared/log.ts';
import { createAdminServer } from '../shared/admin.ts';
import { createProxy } from '../proxy/server.ts';
import { createDbService } from '../db/service.ts';
import { createRemoteDb, createDbServer } from '../db/remote.ts';
import type { DbHandler } from '../db/contract.ts';

export type Part = 'all' | 'proxy' | 'db' | 'account' | 'mirror';
const PARTS: Part[] = ['all', 'proxy', 'db', 'account', 'mirror'];

export interface Running {
  part: Part;
  /** The public listener (proxy, or the part's own), e.g. http://127.0.0.1:8080 */
  url: string;
  adminUrl: string;
  mirrorUrl: string | null;
  close(): Promise<void>;
}

export async function startParts(part: Part, config: Config, logger: Logger, host = process.env.HOST ?? '127.0.0.1'): Promise<Running> {
  const closers: (() => Promise<void>)[] = [];
  let draining = false;
  const admin = createAdminServer(logger, { notReadyReason: () => (draining ? 'draining' : null) });
  let main: FastifyInstance;
  let mirrorUrl: string | null = null;

  if (part === 'db') {
    const db = await createDbService({ config, logger });
    closers.push(() => db.close());
    main = createDbServer({ config, logger, db });
  } else if (part === 'all' || part === 'proxy') {
    let db: DbHandler;
    if (part === 'proxy' || config.services.dbUrl) {
      if (!config.services.dbUrl) throw new Error('serve proxy needs DB_SERVICE_URL (the address of `scopebase serve db`)');
      db = createRemoteDb({ url: config.services.dbUrl, rootKey: config.rootKeys[0]! });
    } else {
      const service = await createDbService({ config, logger });
      closers.push(() => service.close());
      db = service;
    }
    main = await createProxy({ logger, baseDomain: config.baseDomain, bodyLimit: config.db.maxBodyBytes, trustedProxies: config.trustedProxies, db });
  } else {
    throw new Error(`serve ${part}: not available in this build`);
  }

  const address = await main.listen({ port: config.port, host });
  const adminAddress = await admin.listen({ port: config.adminPort, host });
  return {
    part,
    url: address,
    adminUrl: adminAddress,
    mirrorUrl,
    async close() {
      draining = true;
      await main.close(); // waits for in-flight requests; new ones get 503
      for (const close of closers.reverse()) await close();
      await admin.close();
    },
  };
}

export async function startCommand(args: string[]): Promise<number> {
  const part = (args[0] ?? 'all') as Part;
  if (!PARTS.includes(part) || args.length > 1) {
    process.stderr.write(`usage: scopebase serve ${PARTS.filter((p) => p !== 'all').join('|')}\n`);
    return 2;
  }
  const config = loadConfig();
  const logger = createLogger(config.logLevel);
  const running = await startParts(part, config, logger);
  printBanner(running, config);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'draining');
    running.close().then(() => {
      logger.info('stopped');
      process.exit(0);
    }, (e) => {
      logger.error({ err: e }, 'error while stopping');
      process.exit(1);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
  return 0;
}

function printBanner(running: Running, config: Config): void {
  const port = new URL(running.url).port;
  const base = `http://acme.${config.baseDomain}:${port}`;
  const lines = [`scopebase ${running.part} is running: ${running.url} (admin ${running.adminUrl})`];
  if (running.part === 'all' || running.part === 'proxy') {
    lines.push(
      `  try it:`,
      `  curl -s -H "Authorization: Bearer $(npx scopebase secret acme/web)" \\`,
      `    -d '{"sql":"select sqlite_version() as v"}' ${base}/web/_db/query`,
      `  sign in: ${base}/web/_account/login`,
    );
  }
  if (running.mirrorUrl) lines.push(`  reference mirror: ${running.mirrorUrl}`);
  process.stderr.write(lines.join('\n') + '\n');
}
