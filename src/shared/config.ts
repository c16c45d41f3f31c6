// SPEC 9.1: configuration from the environment. A bad value stops the start with a message naming the variable.
import { statSync } from 'node:fs';
import { isIP } from 'node:net';
import { resolve } from 'node:path';
import { getHeapStatistics } from 'node:v8';
import { nearestExisting } from './paths.ts';
import { encryptionKeys, mirrorSecret, requireForProduction, rootKeys } from './config-keys.ts';
import { clusterConfig, clusterNodeOnly, type ClusterConfig } from './config-cluster.ts';

export interface Config {
  production: boolean;
  /** Key variables left unset, whose development keys live in DATA_DIR (never under NODE_ENV=production). */
  generatedKeys: string[];
  /** The address every listener binds (HOST). */
  host: string;
  port: number;
  adminPort: number;
  baseDomain: string;
  dataDir: string;
  rootKeys: Buffer[];
  db: {
    sync: 'full' | 'normal';
    queryTimeoutMs: number;
    maxStatements: number;
    maxResultBytes: number;
    maxSizeBytes: number;
    /**
     * Bytes of SQLite temporary files (sorts, GROUP BY, DISTINCT, materialized subqueries, index builds, statement
     * journals) one executor process may hold at once; past it the statement is stopped (507). src/db/DESIGN.md.
     */
    tempMaxBytes: number;
    /**
     * Bytes of memory one statement may add to its executor process (its rows as read, its parse, an imported SQL
     * text held whole); past it the statement is stopped (507). src/db/DESIGN.md, "Memory".
     */
    memoryMaxBytes: number;
    maxDatabasesPerRepo: number;
    maxValueBytes: number;
    maxBodyBytes: number;
    executors: number;
    /** Fairness and overload (src/db/DESIGN.md, "Scheduling"): executors one repo may occupy, queue bounds, rate limit. */
    executorsPerRepo: number;
    queueTimeoutMs: number;
    queueTargetMs: number;
    /** Past this event-loop delay the service answers 503 at once (0: never). */
    maxLoopDelayMs: number;
    maxQueued: number;
    maxQueuedPerRepo: number;
    /** Requests per second per repo (0: no limit), and the burst allowed above it. */
    rateLimitPerRepo: number;
    rateLimitBurst: number;
    /** A libSQL-protocol stream unused this long is dropped (SPEC 4.10). */
    streamIdleMs: number;
    /** libSQL-protocol streams open at once in all; past it, the busiest repo's least recently used one is closed. */
    maxStreams: number;
    /**
     * Bytes of SQL texts libSQL-protocol streams keep stored (store_sql) between requests: every stream of a repo,
     * and every stream of the process; past either, store_sql is refused (src/db/hrana/streams.ts counts them).
     */
    storedSqlMaxBytesPerRepo: number;
    storedSqlMaxBytes: number;
    /** Interactive transactions open at once in all (32 per repo at most); past it, BEGIN gets 503. */
    maxTransactions: number;
    /** An interactive transaction open longer than this is rolled back (SPEC 4.10). */
    transactionMaxMs: number;
    maxOpenDatabases: number;
    /** A database connection unused this long is closed (0: never). */
    idleCloseMs: number;
    /** Time travel (SPEC 4.11): days of versions kept restorable (0: no history), and the bytes a database's history may take. */
    historyDays: number;
    historyMaxBytes: number;
    /** The bytes every database's history in a repo may take together (the repo's oldest history goes first). */
    historyMaxBytesPerRepo: number;
    /** How often the background sweep visits the next databases' histories (src/db/history-sweep.ts). */
    historySweepMs: number;
    mirrors: MirrorConfig[];
    /** Delivery tuning (SPEC 5): per-attempt timeout, backoff cap, stall threshold, concurrent deliveries per mirror. */
    mirrorDelivery: { timeoutMs: number; maxBackoffMs: number; stallAfterMs: number; concurrency: number };
  };
  account: {
    oidc: { issuer: string; clientId: string; clientSecret: string | undefined } | null;
    github: { clientId: string; clientSecret: string } | null;
    encryptionKeys: Buffer[];
    sessionTtlMs: number;
    /** Sign-in attempts (login + callback) per client address: a token bucket. */
    loginRateLimit: { burst: number; perMinute: number };
    /** ACCOUNT_MAX_PENDING_LOGINS: pending sign-ins (rows of pending_logins) at once; past it /login is 503. */
    maxPendingLogins: number;
    /** How long any call to a sign-in provider may take. */
    providerTimeoutMs: number;
    /** DEV_IDP_PORT: the development identity provider's port on 127.0.0.1 (0: any free port). */
    devIdpPort: number;
  };
  trustedProxies: string[];
  /** MAX_CONNECTIONS, MAX_CONNECTIONS_PER_CLIENT and MAX_WEBSOCKETS_PER_CLIENT; null: derived (connection-cap.ts). */
  connections: { max: number | null; maxPerClient: number | null; maxWebSocketsPerClient: number | null };
  /**
   * MAX_BODY_BYTES_IN_FLIGHT: request-body bytes the process holds in memory at once, across its listeners (declared
   * Content-Lengths reserved as the headers arrive); past it, past a quarter of it for one repo or client address, or
   * past half of it for one org, 503 (src/shared/body-budget.ts, docs/security.md).
   */
  maxBodyBytesInFlight: number;
  /** SHUTDOWN_TIMEOUT_MS: how long SIGTERM waits for requests in flight before it ends their connections. */
  shutdownTimeoutMs: number;
  mirror: { port: number | null; secret: string | null; sourceUrl: string | null };
  apps: Map<string, AppRoute>;
  /** APPS_WS_IDLE_TIMEOUT_MS: a WebSocket to an app that passes no byte either way for this long is closed, both sides. */
  appsWsIdleTimeoutMs: number;
  /** When a part runs as its own process, where the proxy reaches it. */
  services: { dbUrl: string | null; accountUrl: string | null };
  /** Scale-out on etcd (docs/scaling.md); null without CLUSTER_ETCD: one node, as before. */
  cluster: ClusterConfig | null;
  logLevel: string;
  /** LOG_FORMAT: `json`, `pretty`, or null to choose by whether stdout is a terminal. */
  logFormat: 'json' | 'pretty' | null;
  /** Set variables that look like settings but are not (typos): said at start, never fatal. */
  warnings: string[];
}

import { recordingReads, unknownVariables } from './config-names.ts';

import { ConfigError, fail, int, mirrorSource, parseApps, parseMirrors, parseTrustedProxies, serviceUrl, str, url, type AppRoute, type Env, type MirrorConfig } from './config-values.ts';
export type { AppRoute, MirrorConfig } from './config-values.ts';
export { clusterConfig, type ClusterConfig } from './config-cluster.ts';

export { ConfigError };

const MAX_DURATION_DAYS = 3650;

/** Parses `14d`, `12h`, `30m`, `45s` or a bare number of seconds, from one minute to MAX_DURATION_DAYS. */
export function parseDuration(name: string, raw: string): number {
  const m = /^(\d+)([smhd]?)$/.exec(raw.trim());
  if (!m) fail(name, `must be a duration like 14d, 12h, 30m or 3600s, got ${JSON.stringify(raw.slice(0, 40))}`);
  const unit = { '': 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2] as '' | 's' | 'm' | 'h' | 'd'];
  const ms = Number(m[1]) * unit * 1000;
  if (ms < 60_000) fail(name, 'must be at least one minute');
  // Far past this, an expiry is no date (every /verify answered 500); browsers keep a cookie 400 days at most anyway.
  if (ms > MAX_DURATION_DAYS * 86_400_000) fail(name, `must be at most ${MAX_DURATION_DAYS}d (ten years), got ${JSON.stringify(raw.slice(0, 40))}`);
  return ms;
}

const LOG_LEVELS = ['silent', 'fatal', 'error', 'warn', 'info', 'debug', 'trace'] as const;

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[]): T | undefined {
  const v = str(env, name);
  if (v !== undefined && !(allowed as readonly string[]).includes(v)) fail(name, `must be one of ${allowed.join(', ')}, got ${JSON.stringify(v.slice(0, 20))}`);
  return v as T | undefined;
}

/** The part a configuration is for (`start` is 'all'); the CLI's other commands read it as 'all' does. */
export type ConfigPart = 'all' | 'proxy' | 'db' | 'account' | 'mirror';

export function loadConfig(given: Env = process.env, part: ConfigPart = 'all'): Config {
  const { env, read } = recordingReads(given);
  const config = readConfig(env, part);
  return { ...config, warnings: unknownVariables(given, read) };
}

/** BASE_DOMAIN, lowercased; org hosts are {org}.{BASE_DOMAIN}, so it must be a DNS name. */
export function baseDomainOf(env: Env): string {
  const baseDomain = (str(env, 'BASE_DOMAIN') ?? 'localhost').toLowerCase();
  if (!/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$/.test(baseDomain)) fail('BASE_DOMAIN', `must be a DNS name such as example.com, got ${JSON.stringify(baseDomain.slice(0, 60))}`);
  return baseDomain;
}

/** DATA_DIR, resolved. It may not exist yet, but must be a folder or where one can be made: a file there is named now, not met as EEXIST later. */
export function dataDirOf(env: Env): string {
  const dataDir = resolve(str(env, 'DATA_DIR') ?? './data');
  const existing = nearestExisting(dataDir);
  let folder: boolean;
  try {
    folder = statSync(existing).isDirectory();
  } catch (e) {
    fail('DATA_DIR', `${dataDir} cannot be read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  if (!folder) fail('DATA_DIR', existing === dataDir ? `${dataDir} is a file, not a folder: set DATA_DIR to a folder (it is made if missing)` : `${dataDir} cannot be made: ${existing} is a file, not a folder`);
  return dataDir;
}

function readConfig(env: Env, part: ConfigPart): Omit<Config, 'warnings'> {
  const production = env.NODE_ENV === 'production';
  // Meant as production, read as development, it would run the development sign-in (any email signs in) and make keys.
  if (!production && /^\s*prod(uction)?\s*$/i.test(env.NODE_ENV ?? '')) fail('NODE_ENV', `${JSON.stringify(env.NODE_ENV)} is not production mode: only "production", in lowercase, is (anything else runs the development defaults)`);
  // `serve db`, `serve mirror` and a proxy in front of `serve account` never sign anyone in nor open a credential.
  const signsIn = part === 'all' || part === 'account' || (part === 'proxy' && str(env, 'ACCOUNT_SERVICE_URL') === undefined);
  const generatedKeys: string[] = [];
  const dataDir = dataDirOf(env);
  const baseDomain = baseDomainOf(env);
  const sync = str(env, 'DB_SYNC') ?? 'full';
  if (sync !== 'full' && sync !== 'normal') fail('DB_SYNC', `must be "full" or "normal", got ${JSON.stringify(sync.slice(0, 20))}`);
  const oidcIssuer = url(env, 'ACCOUNT_OIDC_ISSUER');
  const oidcClientId = str(env, 'ACCOUNT_OIDC_CLIENT_ID');
  const oidcClientSecret = str(env, 'ACCOUNT_OIDC_CLIENT_SECRET'); // read always: an unread variable is taken for a typo
  if ((oidcIssuer === undefined) !== (oidcClientId === undefined)) fail(oidcIssuer ? 'ACCOUNT_OIDC_CLIENT_ID' : 'ACCOUNT_OIDC_ISSUER', 'ACCOUNT_OIDC_ISSUER and ACCOUNT_OIDC_CLIENT_ID go together');
  const ghId = str(env, 'ACCOUNT_GITHUB_CLIENT_ID');
  const ghSecret = str(env, 'ACCOUNT_GITHUB_CLIENT_SECRET');
  if ((ghId === undefined) !== (ghSecret === undefined)) fail(ghId ? 'ACCOUNT_GITHUB_CLIENT_SECRET' : 'ACCOUNT_GITHUB_CLIENT_ID', 'ACCOUNT_GITHUB_CLIENT_ID and ACCOUNT_GITHUB_CLIENT_SECRET go together');
  if (production) requireForProduction(env, signsIn && oidcIssuer === undefined && ghId === undefined, signsIn);
  const mirrorPortRaw = str(env, 'MIRROR_PORT');
  const maxResultBytes = int(env, 'DB_MAX_RESULT_BYTES', 16 * 1024 * 1024, 1024, 1024 * 1024 * 1024);
  const maxBodyBytes = int(env, 'DB_MAX_BODY_BYTES', 32 * 1024 * 1024, 1024, 1024 * 1024 * 1024);
  // Eight bodies at the default limit at once (four at a raised one), and never under 256 MiB: a held body costs its
  // size (measured: 8 × 30 MB held, RSS +241 MB; completed and parsed, a peak of +277 MB), so bodies add at most about
  // 300 MB to the process (docs/security.md, "Request bodies"). Below one body at the limit, it would pass only alone.
  const maxBodyBytesInFlight = int(env, 'MAX_BODY_BYTES_IN_FLIGHT', Math.max(256 * 1024 * 1024, 4 * maxBodyBytes), maxBodyBytes, Number.MAX_SAFE_INTEGER);
  const maxSizeBytes = int(env, 'DB_MAX_SIZE_BYTES', 1024 * 1024 * 1024, 64 * 1024, Number.MAX_SAFE_INTEGER);
  const host = str(env, 'HOST') ?? '127.0.0.1';
  const executors = int(env, 'DB_EXECUTORS', 2, 1, 64);
  const cluster = clusterConfig(env);
  const rateLimitPerRepo = int(env, 'DB_RATE_LIMIT_PER_REPO', 10_000, 0, 100_000_000);
  if (!isIP(host) && !/^[a-z0-9.-]+$/i.test(host)) fail('HOST', 'must be an IP address or a host name, e.g. 0.0.0.0 to listen on every interface');
  // Stored SQL of every stream is heap: an eighth of this process's heap limit, at most 512 MiB (measured: a full budget
  // of it, on 10,000 streams, grows the heap by at most its own size; src/db/hrana/DESIGN.md).
  const storedSqlMaxBytes = int(env, 'DB_STORED_SQL_MAX_BYTES', Math.min(512 * 1024 ** 2, Math.floor(getHeapStatistics().heap_size_limit / 8)), 1024, Number.MAX_SAFE_INTEGER);
  const storedSqlMaxBytesPerRepo = int(env, 'DB_STORED_SQL_MAX_BYTES_PER_REPO', Math.min(64 * 1024 ** 2, storedSqlMaxBytes), 1024, Number.MAX_SAFE_INTEGER);
  // A repo's histories together: 8 databases at their size limit by default (8 GiB), or one database's cap if set
  // higher; a database's: 8 GiB at most, within its repo's (64 databases of 8 GiB each could fill a disk).
  const historyMaxSet = str(env, 'DB_HISTORY_MAX_BYTES') === undefined ? null : int(env, 'DB_HISTORY_MAX_BYTES', 0, 1 << 20, Number.MAX_SAFE_INTEGER);
  const historyMaxBytesPerRepo = int(env, 'DB_HISTORY_MAX_BYTES_PER_REPO', Math.min(Math.max(8 * maxSizeBytes, historyMaxSet ?? 0, 1 << 20), Number.MAX_SAFE_INTEGER), 1 << 20, Number.MAX_SAFE_INTEGER);
  const historyMaxBytes = historyMaxSet ?? Math.min(8 * 1024 ** 3, historyMaxBytesPerRepo);
  if (historyMaxBytes > historyMaxBytesPerRepo) fail('DB_HISTORY_MAX_BYTES', `must not be above DB_HISTORY_MAX_BYTES_PER_REPO (${historyMaxBytes} > ${historyMaxBytesPerRepo}): one database's history is part of its repo's`);
  if (storedSqlMaxBytesPerRepo > storedSqlMaxBytes) fail('DB_STORED_SQL_MAX_BYTES_PER_REPO', `must not be above DB_STORED_SQL_MAX_BYTES (${storedSqlMaxBytesPerRepo} > ${storedSqlMaxBytes})`);
  const port = int(env, 'PORT', 8080, 0, 65535);
  const adminPort = int(env, 'ADMIN_PORT', 9090, 0, 65535);
  // Both are listened on by every part: the same number would fail at start as if another server held it.
  if (port !== 0 && port === adminPort) fail('ADMIN_PORT', `must differ from PORT (both are ${port})`);
  const devIdpPort = int(env, 'DEV_IDP_PORT', 0, 0, 65535);
  if (devIdpPort !== 0 && (devIdpPort === port || devIdpPort === adminPort)) fail('DEV_IDP_PORT', `must differ from PORT and ADMIN_PORT (${devIdpPort})`);
  const mirrorPort = mirrorPortRaw === undefined ? null : int(env, 'MIRROR_PORT', 0, 0, 65535);
  if (mirrorPort && (mirrorPort === port || mirrorPort === adminPort || mirrorPort === devIdpPort)) fail('MIRROR_PORT', `must differ from PORT, ADMIN_PORT and DEV_IDP_PORT (${mirrorPort})`);
  return {
    production,
    generatedKeys, // filled by rootKeys and encryptionKeys below
    host,
    port,
    adminPort,
    baseDomain,
    dataDir,
    rootKeys: rootKeys(env, dataDir, production, generatedKeys),
    db: {
      sync,
      queryTimeoutMs: int(env, 'DB_QUERY_TIMEOUT_MS', 5000, 10, 3_600_000),
      maxStatements: int(env, 'DB_MAX_STATEMENTS', 100, 1, 100_000),
      maxResultBytes,
      maxSizeBytes,
      // An import or a restore of a database at its size limit needs about twice that (measured: the statement journal
      // of the copied rows, kept to the transaction's end, plus the sort of its largest index); the 1 GiB more is
      // room for sorts of rows no database holds (joins, generated rows). src/db/DESIGN.md, "Temporary space".
      tempMaxBytes: int(env, 'DB_TEMP_MAX_BYTES', Math.min(2 * maxSizeBytes + 1024 ** 3, Number.MAX_SAFE_INTEGER), 1024 * 1024, Number.MAX_SAFE_INTEGER),
      // An imported SQL text is held whole, with its bytes as read (V8 takes at most 2^29 characters of it); the 1 GiB
      // more is a large result's rows and the statement's own work. src/db/DESIGN.md, "Memory".
      memoryMaxBytes: int(env, 'DB_MEMORY_MAX_BYTES', Math.min(maxSizeBytes + 1024 ** 3, Number.MAX_SAFE_INTEGER), 64 * 1024 * 1024, Number.MAX_SAFE_INTEGER),
      maxDatabasesPerRepo: int(env, 'DB_MAX_DATABASES_PER_REPO', 64, 1, 1_000_000),
      maxValueBytes: int(env, 'DB_MAX_VALUE_BYTES', Math.min(8 * 1024 * 1024, maxResultBytes), 1024, 1_000_000_000),
      maxBodyBytes,
      executors,
      executorsPerRepo: int(env, 'DB_EXECUTORS_PER_REPO', executors, 1, executors),
      queueTimeoutMs: int(env, 'DB_QUEUE_TIMEOUT_MS', 1000, 1, 600_000),
      queueTargetMs: int(env, 'DB_QUEUE_TARGET_MS', 50, 1, 600_000),
      maxLoopDelayMs: int(env, 'DB_MAX_LOOP_DELAY_MS', 100, 0, 600_000) || Infinity,
      maxQueued: int(env, 'DB_MAX_QUEUED', 4096, 1, 10_000_000),
      maxQueuedPerRepo: int(env, 'DB_MAX_QUEUED_PER_REPO', 1024, 1, 10_000_000),
      rateLimitPerRepo,
      rateLimitBurst: int(env, 'DB_RATE_LIMIT_BURST', Math.max(1, rateLimitPerRepo), 1, 100_000_000),
      streamIdleMs: int(env, 'DB_STREAM_IDLE_MS', 10_000, 100, 3_600_000),
      maxStreams: int(env, 'DB_MAX_STREAMS', 10_000, 1, 1_000_000),
      storedSqlMaxBytesPerRepo,
      storedSqlMaxBytes,
      maxTransactions: int(env, 'DB_MAX_TRANSACTIONS', 256, 1, 100_000),
      transactionMaxMs: int(env, 'DB_TRANSACTION_MAX_MS', 30_000, 100, 3_600_000),
      maxOpenDatabases: int(env, 'DB_MAX_OPEN', 64, 4, 100_000),
      idleCloseMs: int(env, 'DB_IDLE_CLOSE_MS', 60_000, 0, 86_400_000),
      historyDays: clusterNodeOnly(cluster, 'DB_HISTORY_DAYS', 'time travel', int(env, 'DB_HISTORY_DAYS', cluster?.nodeId ? 0 : 7, 0, 3650)),
      historyMaxBytes,
      historyMaxBytesPerRepo,
      historySweepMs: int(env, 'DB_HISTORY_SWEEP_MS', 30_000, 100, 86_400_000),
      mirrors: parseMirrors(str(env, 'DB_MIRRORS')), // on a cluster node only a database's primary delivers (src/cluster/DESIGN.md)
      mirrorDelivery: {
        timeoutMs: int(env, 'DB_MIRROR_TIMEOUT_MS', 10_000, 50, 600_000),
        maxBackoffMs: int(env, 'DB_MIRROR_MAX_BACKOFF_MS', 60_000, 10, 3_600_000),
        stallAfterMs: int(env, 'DB_MIRROR_STALL_AFTER_MS', 300_000, 10, 86_400_000),
        concurrency: int(env, 'DB_MIRROR_CONCURRENCY', 8, 1, 256),
      },
    },
    account: {
      oidc: oidcIssuer && oidcClientId ? { issuer: oidcIssuer, clientId: oidcClientId, clientSecret: oidcClientSecret } : null,
      github: ghId && ghSecret ? { clientId: ghId, clientSecret: ghSecret } : null,
      encryptionKeys: encryptionKeys(env, dataDir, production, signsIn, generatedKeys),
      sessionTtlMs: parseDuration('ACCOUNT_SESSION_TTL', str(env, 'ACCOUNT_SESSION_TTL') ?? '14d'),
      loginRateLimit: {
        burst: int(env, 'ACCOUNT_LOGIN_RATE_BURST', 30, 1, 1_000_000),
        perMinute: int(env, 'ACCOUNT_LOGIN_RATE_PER_MINUTE', 30, 1, 1_000_000),
      },
      maxPendingLogins: int(env, 'ACCOUNT_MAX_PENDING_LOGINS', 100_000, 1, 100_000_000),
      providerTimeoutMs: int(env, 'ACCOUNT_PROVIDER_TIMEOUT_MS', 10_000, 50, 600_000),
      devIdpPort,
    },
    trustedProxies: parseTrustedProxies(str(env, 'TRUSTED_PROXIES')),
    connections: connectionsConfig(env),
    maxBodyBytesInFlight,
    shutdownTimeoutMs: int(env, 'SHUTDOWN_TIMEOUT_MS', 30_000, 0, 3_600_000),
    mirror: {
      port: mirrorPort,
      secret: mirrorSecret(env, part === 'mirror' || (part === 'all' && mirrorPort !== null)),
      sourceUrl: mirrorSource(env, part === 'mirror'),
    },
    apps: parseApps(str(env, 'APPS')),
    // nginx closes at 60 s (proxy_read_timeout), Cloudflare at 100 s: apps that ping more often than that pass both.
    appsWsIdleTimeoutMs: int(env, 'APPS_WS_IDLE_TIMEOUT_MS', 120_000, 100, 86_400_000),
    services: { dbUrl: serviceUrl(env, 'DB_SERVICE_URL', '`scopebase serve db`') ?? null, accountUrl: serviceUrl(env, 'ACCOUNT_SERVICE_URL') ?? null },
    cluster,
    logLevel: oneOf(env, 'LOG_LEVEL', LOG_LEVELS) ?? 'info',
    logFormat: oneOf(env, 'LOG_FORMAT', ['json', 'pretty'] as const) ?? null,
  };
}

/** Connection caps (docs/reliability.md, "Connections"); unset, connection-cap.ts derives them from the open-files limit. */
function connectionsConfig(env: Env): Config['connections'] {
  const max = str(env, 'MAX_CONNECTIONS') === undefined ? null : int(env, 'MAX_CONNECTIONS', 0, 1, 10_000_000);
  const maxPerClient = str(env, 'MAX_CONNECTIONS_PER_CLIENT') === undefined ? null : int(env, 'MAX_CONNECTIONS_PER_CLIENT', 0, 1, 10_000_000);
  if (max !== null && maxPerClient !== null && maxPerClient > max) fail('MAX_CONNECTIONS_PER_CLIENT', `must not be above MAX_CONNECTIONS (${maxPerClient} > ${max})`);
  const maxWebSocketsPerClient = str(env, 'MAX_WEBSOCKETS_PER_CLIENT') === undefined ? null : int(env, 'MAX_WEBSOCKETS_PER_CLIENT', 0, 1, 10_000_000);
  if (maxWebSocketsPerClient !== null && maxPerClient !== null && maxWebSocketsPerClient > maxPerClient) fail('MAX_WEBSOCKETS_PER_CLIENT', `must not be above MAX_CONNECTIONS_PER_CLIENT (${maxWebSocketsPerClient} > ${maxPerClient})`);
  return { max, maxPerClient, maxWebSocketsPerClient };
}
