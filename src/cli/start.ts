// `scopebase start` (every part in one process) and `scopebase serve <part>` (one part alone).
import { resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { chmodSync, mkdirSync } from 'node:fs';
import { ConfigError, loadConfig, type Config } from '../shared/config.ts';
import { createLogger, logDestination, type Logger } from '../shared/log.ts';
import { handleProcessFaults } from '../shared/process-faults.ts';
import { createAdminServer } from '../shared/admin.ts';
import { publicConnections, type ConnectionCap } from '../shared/connection-cap.ts';
import { setBodyBudget } from '../shared/body-budget.ts';
import { createProxy } from '../proxy/server.ts';
import { createDbService } from '../db/service.ts';
import { createRemoteDb, createDbServer } from '../db/remote.ts';
import type { DbHandler } from '../db/contract.ts';
import { listenReferenceMirror, startMirrorDelivery } from '../mirror/wiring.ts';
import { accountAlone } from '../account/wiring.ts';
import { accountForProxy } from '../proxy/account-wiring.ts';
import { startClusterNode, startClusterRouter } from '../cluster/wiring.ts';
import { describeIoError } from './files.ts';
import { shellWord } from './output.ts';
import { DataDirInUse, lockData, lockFolder, START_WAIT_MS, type DataLock, type DataPart } from '../shared/data-lock.ts';

export type Part = 'all' | 'proxy' | 'db' | 'account' | 'mirror';

export interface Running {
  part: Part;
  /** The public listener (proxy, or the part's own), e.g. http://127.0.0.1:8080 */
  url: string;
  adminUrl: string;
  mirrorUrl: string | null;
  /** The development identity provider this process runs, if any. */
  devIdpUrl: string | null;
  /** The public and admin servers (tests read their route tables). */
  servers: { main: FastifyInstance; admin: FastifyInstance };
  close(): Promise<void>;
}

export async function startParts(part: Part, config: Config, logger: Logger, host = config.host): Promise<Running> {
  // Before anything listens or opens a file: a second process on the same part's data stops here.
  const lock = lockParts(part, config);
  const closers: (() => Promise<void>)[] = [async () => lock.release()];
  let draining = false;
  let started = false;
  setBodyBudget(config.maxBodyBytesInFlight);
  const admin = createAdminServer(logger, { notReadyReason: () => (draining ? 'draining' : started ? null : 'starting') });
  const closeAll = async () => {
    for (const close of closers.reverse()) await close();
    await admin.close();
  };
  try {
    // The admin port first: taken, it stops the start before any part has started (and logged that it did).
    const adminAddress = await admin.listen({ port: config.adminPort, host });
    const connections = publicConnections(config, logger, part === 'db' || part === 'account');
    const { main, url, mirrorUrl, devIdpUrl } = await startMain(part, config, logger, host, closers, connections);
    started = true;
    return {
      part,
      url,
      adminUrl: adminAddress,
      mirrorUrl,
      devIdpUrl,
      servers: { main, admin },
      async close() {
        draining = true;
        // A request whose body never comes would hold the drain for ever (Node stops timing requests once closing).
        const deadline = setTimeout(() => {
          const ended = connections.closeAll();
          if (ended > 0) logger.warn({ connections: ended, shutdownTimeoutMs: config.shutdownTimeoutMs }, 'SHUTDOWN_TIMEOUT_MS passed: ended the connections still open');
        }, config.shutdownTimeoutMs);
        try {
          await closeAll(); // the listener closes first: in-flight requests finish, new ones get 503
        } finally {
          clearTimeout(deadline);
        }
      },
    };
  } catch (e) {
    // A part that refused to start must not leave the others running (the process would never exit).
    await closeAll().catch(() => {});
    throw e;
  }
}

async function startMain(part: Part, config: Config, logger: Logger, host: string, closers: (() => Promise<void>)[], connections: ConnectionCap): Promise<{ main: FastifyInstance; url: string; mirrorUrl: string | null; devIdpUrl: string | null }> {
  let main: FastifyInstance;
  let devIdpUrl: string | null = null;
  if (part === 'db') {
    const db = await createDbService({ config, logger });
    closers.push(() => db.close());
    const delivery = startMirrorDelivery(config, logger, db);
    if (delivery) closers.push(() => delivery.close());
    main = createDbServer({ config, logger, db, connections });
    if (config.cluster !== null) {
      const node = await startClusterNode(config, logger, db, main, delivery?.cluster ?? null);
      closers.push(() => node.close());
    }
  } else if (part === 'all' || part === 'proxy') {
    if (part === 'all' && config.cluster !== null) throw new ConfigError('CLUSTER_ETCD: a cluster runs `scopebase serve db` nodes and `scopebase serve proxy`; `start` is one node (docs/scaling.md)');
    let db: DbHandler;
    if (part === 'proxy' && config.cluster !== null) {
      const router = await startClusterRouter(config);
      closers.push(() => router.close());
      db = router;
    } else if (part === 'proxy' || config.services.dbUrl) {
      if (!config.services.dbUrl) throw new ConfigError('DB_SERVICE_URL: serve proxy needs the address of `scopebase serve db`');
      const remote = createRemoteDb({ url: config.services.dbUrl, rootKey: config.rootKeys[0]! });
      closers.push(() => remote.close());
      db = remote;
    } else {
      const service = await createDbService({ config, logger });
      closers.push(() => service.close());
      const delivery = startMirrorDelivery(config, logger, service);
      if (delivery) closers.push(() => delivery.close());
      db = service;
    }
    const accounts = await accountForProxy(config, logger);
    closers.push(() => accounts.close());
    devIdpUrl = accounts.devIdpUrl ?? null;
    main = await createProxy({ logger, baseDomain: config.baseDomain, bodyLimit: config.db.maxBodyBytes, rootKeys: config.rootKeys, trustedProxies: config.trustedProxies, db, account: accounts.account, apps: accounts.apps, verify: accounts.verify, connections });
  } else if (part === 'account') {
    const accounts = await accountAlone(config, logger, connections);
    closers.push(() => accounts.close());
    main = accounts.server;
    devIdpUrl = accounts.devIdpUrl ?? null;
  } else {
    const { mirror, url } = await listenReferenceMirror(config, logger, host, null, connections);
    closers.push(() => mirror.close());
    return { main: mirror.app, url, mirrorUrl: url, devIdpUrl };
  }
  closers.push(() => main.close());
  const url = await main.listen({ port: config.port, host });
  let mirrorUrl: string | null = null;
  if (part === 'all' && config.mirror.port !== null) {
    const started = await listenReferenceMirror(config, logger, host, url, connections);
    closers.push(() => started.mirror.close());
    mirrorUrl = started.url;
  }
  return { main, url, mirrorUrl, devIdpUrl };
}

/** The data in DATA_DIR this process's parts own: what a second process must not run on at the same time. */
export function ownedData(part: Part, config: Config): DataPart[] {
  const all = part === 'all';
  return [
    ...((part === 'db' || (all && !config.services.dbUrl)) ? ['db' as const] : []),
    ...((part === 'account' || ((all || part === 'proxy') && !config.services.accountUrl)) ? ['account' as const] : []),
    ...((part === 'mirror' || (all && config.mirror.port !== null)) ? ['mirror' as const] : []),
  ];
}

function lockParts(part: Part, config: Config): DataLock {
  const holder = part === 'all' ? 'scopebase start' : `scopebase serve ${part}`;
  const parts = ownedData(part, config);
  try {
    return lockData(config.dataDir, parts, { holder, waitMs: START_WAIT_MS });
  } catch (e) {
    if (e instanceof DataDirInUse) {
      const then = e.holder === 'scopebase restore' ? 'wait for the restore to end, then start again' : 'stop that process first, or give this one another DATA_DIR (docs/deploy.md)';
      throw new ConfigError(`DATA_DIR: ${e.message}: ${then}`);
    }
    throw new ConfigError(`DATA_DIR: cannot take the lock on its data: ${describeIoError(e, lockFolder(config.dataDir))}`);
  }
}

/** A port already taken, or a HOST this machine lacks, named by the variable that sets it (one line instead of a stack trace). */
function listenFailure(e: unknown, config: Config): ConfigError | null {
  const err = e as { code?: string; port?: number; address?: string; hostname?: string; syscall?: string };
  // HOST names no address of this machine: that is the variable to fix, not a crash.
  if (err?.syscall === 'getaddrinfo' || err?.code === 'EADDRNOTAVAIL') {
    return new ConfigError(`HOST: ${JSON.stringify(config.host)} is not an address of this machine (${err.code}): use an address it has, e.g. 127.0.0.1 or 0.0.0.0`);
  }
  if (err?.code !== 'EADDRINUSE' && err?.code !== 'EACCES') return null;
  const names = [['PORT', config.port], ['ADMIN_PORT', config.adminPort], ['MIRROR_PORT', config.mirror.port], ['DEV_IDP_PORT', config.account.devIdpPort]] as const;
  const name = names.find(([, port]) => port === err.port)?.[0] ?? 'PORT';
  const why = err.code === 'EADDRINUSE' ? 'is already in use (another scopebase or server is running there)' : 'may not be used by this user';
  return new ConfigError(`${name}: port ${err.port} on ${err.address ?? config.host} ${why}: stop that process or start with ${name}=<another port>`);
}

/** DATA_DIR itself (created, or made by an operator with a looser mode): 0700. */
function ownerOnly(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
  } catch (e) {
    throw new ConfigError(`DATA_DIR: ${describeIoError(e, dir)}: give a folder this user may create or owns`);
  }
}

export async function startCommand(part: Part): Promise<number> {
  // Everything the product creates under DATA_DIR holds data or keys: owner-only, whatever the operator's umask.
  // Executors inherit it; SQLite gives -wal and -shm files the database file's mode.
  process.umask(0o077);
  const config = loadConfig(process.env, part);
  ownerOnly(config.dataDir);
  const logger = createLogger(config.logLevel, await logDestination(config.logFormat ?? undefined));
  handleProcessFaults(logger); // before any part starts: its timers and handlers run from then on
  for (const warning of config.warnings) logger.warn(warning);
  let running: Running;
  try {
    running = await startParts(part, config, logger);
  } catch (e) {
    throw listenFailure(e, config) ?? e;
  }
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

/** The root key as the banner's lines name it when it came from the environment: never its value. */
const GIVEN_KEY = 'RUNTIME_ROOT_KEY=…';

function printBanner(running: Running, config: Config): void {
  const port = new URL(running.url).port;
  const base = `http://acme.${config.baseDomain}:${port}`;
  const proxied = running.part === 'all' || running.part === 'proxy';
  // The org host first: the listener's bare address answers every page with 404 unknown_host.
  // The reference mirror alone answers reads at the org host too (SPEC 6), not at its bare address.
  const first = proxied ? `${base}/web/ (acme and web stand for any org and repo)`
    : running.part === 'mirror' ? `${base}/web/_db/query (POST, the repo's secret; acme and web stand for any org and repo)` : running.url;
  const lines = [
    `scopebase ${running.part} is running: ${first}`,
    `  address: ${running.url} (admin ${running.adminUrl})`,
  ];
  // What `npx scopebase …` in another terminal must share with this server to find it and derive the same secrets.
  const dataDir = resolve(config.dataDir) === resolve('./data') ? [] : [`DATA_DIR=${shellWord(resolve(config.dataDir))}`];
  // A key this process was given is in no other terminal (and DATA_DIR may hold another): named, its value elided.
  const keyGiven = !config.generatedKeys.includes('RUNTIME_ROOT_KEY');
  const keyEnv = keyGiven ? [GIVEN_KEY] : dataDir;
  const cliEnv = [...dataDir, ...(keyGiven ? [GIVEN_KEY] : []), ...(port === '8080' ? [] : [`PORT=${port}`]), ...(config.baseDomain === 'localhost' ? [] : [`BASE_DOMAIN=${config.baseDomain}`])];
  if (proxied) {
    lines.push(
      `  sign in: ${base}/web/_account/login`,
      `  try it:  curl -s -H "Authorization: Bearer $(${[...keyEnv, 'npx scopebase secret acme/web'].join(' ')})" -d '{}' ${base}/web/_db/status`,
    );
    if (cliEnv.length) lines.push(`  cli:     export ${cliEnv.join(' ')} (in another terminal, so npx scopebase … uses this server and its key)`);
    if (keyGiven) lines.push(`  key:     this server was given RUNTIME_ROOT_KEY, which is never printed: put it in place of … in ${GIVEN_KEY}`);
  }
  if (running.part !== 'proxy') lines.push(`  data:    ${resolve(config.dataDir)} (DATA_DIR)`);
  if (running.mirrorUrl && running.part !== 'mirror') lines.push(`  reference mirror: ${running.mirrorUrl}`);
  if (running.devIdpUrl) lines.push(`  development sign-in provider: ${running.devIdpUrl} (forward this port too from a remote machine; DEV_IDP_PORT fixes it)`);
  const devIdp = running.devIdpUrl !== null;
  const dev = [
    ...(config.generatedKeys.length ? [`keys generated in DATA_DIR (${config.generatedKeys.join(', ')})`] : []),
    ...(devIdp ? ['the development identity provider (any email signs in)'] : []),
  ];
  // The advice names what to do about each thing said (with the keys set, "set them" had nothing to refer to).
  const todo = [...(config.generatedKeys.length ? ['set those keys'] : []), ...(devIdp ? ['configure a sign-in provider'] : [])];
  if (dev.length) lines.push(`  DEVELOPMENT MODE: ${dev.join(' and ')}; for real use ${todo.join(', ')} and NODE_ENV=production (docs/deploy.md)`);
  for (const warning of config.warnings) lines.push(`  warning: ${warning}`);
  process.stderr.write(lines.join('\n') + '\n');
}
