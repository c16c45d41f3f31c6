// The database control service (SPEC 4): authenticates, validates, and hands work to the executor pool.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ApiError } from '../shared/errors.ts';
import type { Config } from '../shared/config.ts';
import type { Logger } from '../shared/log.ts';
import { loopDelayMs, watchLoopDelay } from '../shared/loop-delay.ts';
import { RateLimiter } from '../shared/rate-limit.ts';
import { repoSecretRefusal } from '../shared/secrets.ts';
import { dbRequests as requests, opLabel, unknownOperation } from './admit.ts';
import type { ChangeEvent, ChangeFeed, DbHandler, DbRequest, DbResponse, MirrorReport, Replication, Scope } from './contract.ts';
import { ExecutorPool, type ExecReply } from './executor/pool.ts';
import { LostCommitError } from './executor/pool-errors.ts';
import { pools, restarts } from './executor-metrics.ts';
import { KnownDatabases } from './known-databases.ts';
import { ChangeLog } from './change-log.ts';
import { Layout } from './layout.ts';
import { importParams } from './import.ts';
import { databaseOf, MAX_CHANGES_PAGE, parseBody, validate, type Op } from './request.ts';
import { Hrana, isCursor, pipelineDatabase } from './hrana/index.ts';
import { json, JSON_TYPE, notFound, pipelineBackend } from './pipeline-backend.ts';
import { removeCopy } from './history/rebuild.ts';
import { tmpFile } from './files.ts';
import { FileEndpoints } from './file-endpoints.ts';
import { TEMP_SPACE_WATCHED } from './executor/temp-space.ts';
import { HistorySweep } from './history-sweep.ts';

export interface DbServiceOptions {
  config: Config;
  logger: Logger;
}

/** Operations a cluster's primary alone may run. */
const WRITES = new Set<string>(['execute', 'migrate', 'restore', 'import']);
export { MAX_FILES_PER_REPO } from './file-endpoints.ts'; // where it was first, for its importers

export class DbService implements DbHandler, ChangeFeed {
  private readonly pool: ExecutorPool;
  private readonly layout: Layout;
  private readonly listeners: ((scope: Scope, version: number) => void)[] = [];
  private mirrors: MirrorReport | null = null;
  private replication: Replication | null = null;
  private readonly databases: KnownDatabases;
  private readonly changeLog: ChangeLog;
  private readonly tmpDir: string;
  private readonly files: FileEndpoints;
  /** SPEC 3's 429: requests per repo, after authentication (a stranger cannot spend a repo's allowance). */
  private readonly limiter: RateLimiter | null;
  private readonly unwatchLoop = watchLoopDelay();
  private readonly hrana: Hrana;
  /** The database a parsed request named: a failure's log names its file without parsing the body again. */
  private readonly databaseOfRequest = new WeakMap<DbRequest, string>();
  /** Prunes idle databases' histories (null with history off). */
  private readonly historySweep: HistorySweep | null;

  private readonly config: Config;
  private readonly logger: Logger;

  constructor(config: Config, logger: Logger) {
    this.config = config;
    this.logger = logger;
    this.layout = new Layout(join(config.dataDir, 'db'));
    this.tmpDir = join(config.dataDir, 'tmp');
    mkdirSync(this.layout.root, { recursive: true });
    rmSync(this.tmpDir, { recursive: true, force: true });
    mkdirSync(this.tmpDir, { recursive: true });
    const db = config.db;
    this.pool = new ExecutorPool({
      processes: db.executors,
      limits: {
        sync: db.sync, maxValueBytes: db.maxValueBytes, maxSizeBytes: db.maxSizeBytes, maxResultBytes: db.maxResultBytes, maxOpen: db.maxOpenDatabases, idleCloseMs: db.idleCloseMs,
        tempDir: this.tmpDir, tempMaxBytes: db.tempMaxBytes, memoryMaxBytes: db.memoryMaxBytes, // SQLite's files there are unlinked as they are made
        history: db.historyDays > 0 ? { root: join(config.dataDir, 'history'), dbRoot: join(config.dataDir, 'db'), days: db.historyDays, maxBytes: db.historyMaxBytes, repoMaxBytes: db.historyMaxBytesPerRepo } : undefined,
      },
      timeoutMs: db.queryTimeoutMs,
      perTenant: db.executorsPerRepo,
      queueTimeoutMs: db.queueTimeoutMs,
      queueTargetMs: db.queueTargetMs,
      maxQueued: db.maxQueued,
      maxQueuedPerTenant: db.maxQueuedPerRepo,
      onError: (e) => this.logger.error({ err: e }, 'executor scheduler error (the request it concerned may have failed; serving goes on)'),
      beforeCreate: (scope, path) => this.databases.beforeCreate(scope, path),
      floor: (scope) => this.mirrors?.acknowledgedFloor(scope) ?? null,
      onCommit: (scope, version) => this.committed(scope, version),
      onLateCommit: (scope, version) => {
        this.committed(scope, version);
        this.replication?.replicatedLater(scope, version); // found by the background re-probe: on the follower now, not at the next write
      },
      onRestart: (pid, reason) => {
        restarts.inc();
        this.logger.warn({ pid, reason }, 'executor process replaced');
      },
    });
    if (!TEMP_SPACE_WATCHED) this.logger.warn('no /proc on this system: SQLite\'s temporary files are not measured, and DB_TEMP_MAX_BYTES and DB_MEMORY_MAX_BYTES are not enforced');
    this.limiter = db.rateLimitPerRepo > 0
      ? new RateLimiter({ burst: db.rateLimitBurst, perMinute: db.rateLimitPerRepo * 60, refusal: `this repo sent more than ${db.rateLimitPerRepo} requests per second (DB_RATE_LIMIT_PER_REPO)`, maxClients: 100_000 })
      : null;
    pools.add(this.pool);
    this.databases = new KnownDatabases(this.layout, this.pool, db.maxDatabasesPerRepo);
    this.changeLog = new ChangeLog({ pool: this.pool, layout: this.layout, exists: (s) => this.exists(s) });
    this.hrana = new Hrana(db);
    this.historySweep = db.historyDays > 0 ? new HistorySweep({ layout: this.layout, pool: this.pool, everyMs: db.historySweepMs, logger }) : null;
    this.files = new FileEndpoints({
      pool: this.pool, layout: this.layout, tmpDir: this.tmpDir, limits: db,
      exists: (s) => this.exists(s), admittedWrite: (s, work) => this.admittedWrite(s, work), replicated: (s, res) => this.replicated(s, res),
    });
  }

  attachMirrors(report: MirrorReport): void {
    this.mirrors = report;
  }

  attachReplication(replication: Replication): void {
    this.replication = replication;
  }

  /** A version committed: told to the listeners (mirror delivery, metrics). */
  private committed(scope: Scope, version: number): void {
    for (const l of this.listeners) {
      try {
        l(scope, version);
      } catch (e) {
        // The write committed: a listener's failure must not turn its reply into an error, nor stop the server.
        this.logger.error({ err: e }, 'commit listener failed');
      }
    }
  }

  private exists(scope: Scope): boolean {
    return this.databases.exists(scope);
  }

  /**
   * A write's reply, once its version is on the follower too (cluster mode; nothing to wait for on one node). So is
   * the 503 `committed: true` of a write whose reply was lost: it is as much on disk as a 200's.
   */
  private async replicated(scope: Scope, write: Promise<ExecReply>): Promise<ExecReply> {
    let res: ExecReply;
    try {
      res = await write;
    } catch (e) {
      if (this.replication !== null && e instanceof LostCommitError) await this.replication.replicated(scope, e.version);
      throw e;
    }
    if (this.replication !== null && res.version !== undefined) await this.replication.replicated(scope, res.version);
    return res;
  }

  async handle(req: DbRequest): Promise<DbResponse> {
    // Every answer is counted, refusals too; an unknown op is one label value, so a client cannot grow the series.
    const op = opLabel(req.op, req.upload !== undefined);
    try {
      const res = await this.answer(op, req);
      requests.inc({ op, status: res.status });
      if (res.status >= 500 && res.status !== 503) this.logFailure(req, op, res);
      return res.status === 503 && res.headers?.['retry-after'] === undefined ? { ...res, headers: { ...res.headers, ...RETRY } } : res;
    } catch (e) {
      requests.inc({ op, status: e instanceof ApiError ? e.status : 500 });
      const hold = e instanceof ApiError && e.code === 'rate_limited' ? this.limiter?.holdMs(`${req.org}/${req.repo}`) : 0;
      if (hold) await new Promise((r) => setTimeout(r, hold)); // it ignores Retry-After: slow it down, not others
      if (e instanceof ApiError && e.status === 503 && e.headers?.['retry-after'] === undefined) throw new ApiError(e.code, e.message, e.details, { ...e.headers, ...RETRY });
      throw e;
    }
  }

  /** A server-side failure (a damaged file, an I/O error) is logged with the file it concerns: the reply names no path. */
  private logFailure(req: DbRequest, op: string, res: DbResponse): void {
    let database = this.databaseOfRequest.get(req) ?? pipelineDatabase(req.op) ?? 'main';
    try {
      // An import names its database in the query string: its body is the upload, not JSON.
      if (req.upload) database = importParams(req.upload.query, req.upload.contentType).database;
    } catch {
      // a query naming no valid database: the file is main's
    }
    const file = this.layout.path({ org: req.org, repo: req.repo, database });
    const error = typeof res.body === 'string' || Buffer.isBuffer(res.body) ? res.body.toString().slice(0, 500) : undefined;
    // A 507 is most often a tenant at its own limit (size, value, databases), which it can repeat at will: a warning;
    // a full disk shows there too, and in the 507s of scopebase_db_requests_total.
    const level = res.status === 507 ? 'warn' : 'error';
    this.logger[level]({ org: req.org, repo: req.repo, op, status: res.status, file, error }, 'database request failed');
  }

  private async answer(name: string, req: DbRequest): Promise<DbResponse> {
    if (loopDelayMs() > this.config.db.maxLoopDelayMs) throw saturated(this.config.db.maxLoopDelayMs);
    if (name === 'pipeline') return this.pipeline(req);
    if (name === 'import') return this.importUpload(req);
    if (name === 'unknown') throw unknownOperation(req.op);
    const op = name as Op;
    const body = parseBody(op, req.body);
    const scope: Scope = { org: req.org, repo: req.repo, database: databaseOf(body) };
    this.databaseOfRequest.set(req, scope.database);
    this.authorize(req);
    validate(op, body, this.config.db.maxStatements, this.config.db.maxValueBytes);
    if (WRITES.has(op)) return this.admittedWrite(scope, () => this.run(op, scope, body, req.body), op !== 'restore' && !isBaseline(op, body));
    if (this.replication !== null) await this.replication.admit(scope, false);
    return this.run(op, scope, body, req.body);
  }

  /**
   * A write, admitted in a cluster until it is over: a failed first write leaves no placement (src/cluster/claims.ts).
   * `creates` false (a restore): a database placed nowhere is not found, with no claim of a placement.
   */
  private async admittedWrite<T>(scope: Scope, work: () => Promise<T>, creates = true): Promise<T> {
    const replication = this.replication;
    if (replication === null) return work();
    await replication.admit(scope, true, creates);
    try {
      return await work();
    } finally {
      await replication.settled(scope);
    }
  }

  /** SPEC 4.1 (unless the route checked it before the body: admit.ts) and the per-repo rate limit. */
  private authorize(req: DbRequest): void {
    const refusal = req.authenticated === true ? null : repoSecretRefusal(this.config.rootKeys, req.org, req.repo, req.authorization);
    if (refusal !== null) throw refusal;
    this.limiter?.take(`${req.org}/${req.repo}`);
  }

  /** SPEC 4.10: a Hrana pipeline, its statements run as the reads and writes of 4.3 and 4.4. */
  private async pipeline(req: DbRequest): Promise<DbResponse> {
    const scope: Scope = { org: req.org, repo: req.repo, database: pipelineDatabase(req.op)! };
    this.authorize(req);
    // As a read: a pipeline that only reads a database not placed yet claims nothing (its writes are admitted one by
    // one, and the first that may create the database claims it: pipeline-backend.ts).
    if (this.replication !== null) await this.replication.admit(scope, false);
    const backend = pipelineBackend(scope, this.layout.path(scope), {
      pool: this.pool, replication: this.replication, limits: this.config.db,
      exists: (s) => this.exists(s), replicated: (s, res) => this.replicated(s, res),
      reportBug: (e) => this.logger.error({ err: e, org: scope.org, repo: scope.repo, database: scope.database }, 'a libSQL request failed unexpectedly (answered SQLITE_INTERNAL)'),
    });
    const stream = `${scope.org}/${scope.repo}/${scope.database}`;
    if (isCursor(req.op)) return { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8' }, body: await this.hrana.cursor(stream, backend, req.body) };
    return { status: 200, headers: { 'content-type': JSON_TYPE }, body: await this.hrana.pipeline(stream, backend, req.body) };
  }

  private async run(op: Op, scope: Scope, body: Record<string, unknown>, raw: Buffer): Promise<DbResponse> {
    const path = this.layout.path(scope);
    switch (op) {
      case 'execute': case 'migrate':
        if (isBaseline(op, body) && !this.exists(scope)) throw noBaselineTarget(scope);
        return json(await this.replicated(scope, this.pool.write(scope, path, op, raw)));
      case 'restore': {
        if (!this.exists(scope)) throw notFound(scope);
        // The version is rebuilt into a copy named here, so it goes even if the executor building it is killed.
        const copy = tmpFile(this.tmpDir, 'restore', 'sqlite');
        try {
          return json(await this.replicated(scope, this.pool.write(scope, path, 'restore', Buffer.from(JSON.stringify({ ...body, copy })))));
        } finally {
          for (const f of [copy, `${copy}.after`]) removeCopy(f);
        }
      }
      case 'query':
        if (!this.exists(scope)) throw notFound(scope);
        return json(await this.pool.read({ op: 'query', path }, raw));
      case 'status':
        return this.status(scope, path);
      case 'changes': {
        if (!this.exists(scope)) throw notFound(scope); // the executor's own 404 could not name the database
        const res = await this.pool.read({ op: 'changes', path, since: body.since, limit: body.limit ?? MAX_CHANGES_PAGE });
        return json(res);
      }
      case 'snapshot':
        return this.files.snapshot(scope, path);
      case 'export':
        return this.files.exportFile(scope, path, (body.format as 'sqlite' | 'sql' | undefined) ?? 'sqlite');
    }
  }

  /** SPEC 4.12: checked before the body is read, received into a file, then installed by the executor as one write. */
  private async importUpload(req: DbRequest): Promise<DbResponse> {
    const upload = req.upload!;
    const params = importParams(upload.query, upload.contentType);
    this.authorize(req);
    const scope: Scope = { org: req.org, repo: req.repo, database: params.database };
    return this.files.importUpload(scope, params, upload);
  }

  private async status(scope: Scope, path: string): Promise<DbResponse> {
    const databases = this.replication?.databases(scope.org, scope.repo) ?? this.layout.databases(scope.org, scope.repo);
    if (!this.exists(scope)) return { status: 200, body: JSON.stringify({ database: scope.database, exists: false, databases }) };
    const res = await this.pool.read({ op: 'status', path });
    if (res.status !== 200) return json(res);
    const s = JSON.parse(res.body.toString('utf8')) as { version: number; sizeBytes: number; tables: unknown; migrations: unknown; history: unknown };
    const mirrors = this.mirrors?.states(scope, s.version) ?? [];
    return { status: 200, body: JSON.stringify({ database: scope.database, exists: true, version: s.version, sizeBytes: s.sizeBytes, tables: s.tables, migrations: s.migrations, history: s.history, mirrors, databases }) };
  }

  // What a cluster node needs besides the change log: where a database lives, a consistent copy, and letting go of it.
  databasePath(scope: Scope): string {
    return this.layout.path(scope);
  }

  /** A consistent copy of the database with its internal tables, in DATA_DIR/tmp; the caller removes it. */
  snapshotFile(scope: Scope): Promise<{ path: string; version: number }> {
    return this.files.snapshotFile(scope);
  }

  /** The executors close the database's file: another writer (a cluster's follower path) is about to change it. */
  forget(scope: Scope): Promise<void> {
    return this.databases.forget(scope);
  }

  /**
   * A cluster follower's apply of the primary's events to its copy (ExecutorPool.applyToCopy), on an executor under
   * the statement time limit (DB_QUERY_TIMEOUT_MS) or `maxMs` if shorter: never on this process's event loop.
   */
  applyToCopy(scope: Scope, body: Buffer, maxMs: number): Promise<{ version: number } | { problem: string; stopped?: true }> {
    return this.pool.applyToCopy(this.layout.path(scope), body, Math.min(this.config.db.queryTimeoutMs, maxMs));
  }

  /** A cluster follower's copy: version (0: none) and newest event id, read on an executor as applyToCopy runs. */
  copyState(scope: Scope, maxMs: number): Promise<{ version: number; lastEventId: string | null } | { problem: string; stopped?: true }> {
    return this.pool.copyState(this.layout.path(scope), Math.min(this.config.db.queryTimeoutMs, maxMs));
  }

  /** A snapshot received for a follower's copy (`file`): its version, read and checkpointed on an executor. */
  checkSnapshot(scope: Scope, file: string): Promise<{ version: number } | { problem: string; stopped?: true }> {
    return this.pool.checkSnapshot(this.layout.path(scope), file, this.config.db.queryTimeoutMs);
  }

  get temporaryDir(): string {
    return this.tmpDir;
  }

  // ChangeFeed: how mirror delivery reads the change log.
  onCommit(listener: (scope: Scope, version: number) => void): void {
    this.listeners.push(listener);
  }

  readChanges(scope: Scope, since: number, limit: number): Promise<{ events: ChangeEvent[]; version: number }> {
    return this.changeLog.readChanges(scope, since, limit);
  }

  /** A cluster primary's next shipment after `since`, as the executor's text (ChangeLog.readShipment). */
  readShipment(scope: Scope, since: number, limit: number): Promise<Buffer | null> {
    return this.changeLog.readShipment(scope, since, limit);
  }

  /** Mirror delivery's page of the change log, as the executor's text (ChangeLog.readChangePage). */
  readChangePage(scope: Scope, since: number, limit: number): Promise<Buffer> {
    return this.changeLog.readChangePage(scope, since, limit);
  }

  currentVersion(scope: Scope): Promise<number | null> {
    return this.changeLog.currentVersion(scope);
  }

  listDatabases(): AsyncIterable<Scope> {
    return this.layout.all();
  }

  executorPids(): (number | undefined)[] {
    return this.pool.pids();
  }

  async close(): Promise<void> {
    pools.delete(this.pool);
    this.unwatchLoop();
    this.hrana.close();
    await this.historySweep?.close();
    await this.pool.close();
  }
}

/** SPEC 3: a 503 says when to retry. Every answer of the service passes DbService.handle, which adds it where missing. */
const RETRY = { 'retry-after': '1' };

function saturated(limitMs: number): ApiError {
  return new ApiError('unavailable', `the database service is overloaded: its event loop runs over ${limitMs} ms late (DB_MAX_LOOP_DELAY_MS); nothing of this request ran, retry after a second`, { committed: false }, { 'retry-after': '1' });
}

export async function createDbService(opts: DbServiceOptions): Promise<DbService> {
  return new DbService(opts.config, opts.logger);
}

/** A migrate with `baseline` records migrations an existing content holds: it never creates a database. */
const isBaseline = (op: Op, body: Record<string, unknown>): boolean => op === 'migrate' && body.baseline !== undefined;

const noBaselineTarget = (scope: Scope) => new ApiError('database_not_found', `database ${JSON.stringify(scope.database)} does not exist in ${scope.org}/${scope.repo}: "baseline" records migrations a database's content already holds; import the database first, or leave out baseline to run them`);
