// Executor-side writes. Concurrent execute requests to one database commit together (group commit): one
// transaction, a savepoint per request so one request's failure never undoes another's, one fsync, and every
// reply only after COMMIT. Each changing request gets its own version, changeset and change-log event.
import { createHash, randomBytes } from 'node:crypto';
import type { DbHandle } from './handles.ts';
import { assertSchemaClean, INTERNAL_PREFIX, ordinaryTables } from '../sandbox.ts';
import { replyTooLarge, ResultBudget, runWrite, type RowShape, type StatementSpec } from './statements.ts';
import { errorReply, failure, type Reply } from './reply.ts';
import { ApiError } from '../../shared/errors.ts';
import { KEEP_EVENTS, KEEP_MS } from './schema.ts';
import { SCHEMA_FINGERPRINT_KEY, schemaFingerprint } from '../schema-fingerprint.ts';
import { deferForeignKeys, endDeferral, turnsForeignKeysOff, withForeignKeysOff } from './foreign-keys.ts';
import { keepHistory } from './history-ops.ts';
import { execMigration } from './alter-column.ts';
import { anyVirtual, asMade, capturable, KeyWatch } from './key-cover.ts';

export interface Scope { org: string; repo: string; database: string }

export interface GroupContext {
  scope: Scope;
  maxResultBytes: number;
  /** Lowest version every mirror acknowledged (events above it are kept), or null. */
  floor: number | null;
  /** Written into the transaction so a lost reply can be told from a write that never committed. */
  token: string;
  /** When a group's requests commit (one COMMIT, one time for each of its events); else each event reads the clock. */
  committedAt?: number;
  /** Called the moment COMMIT succeeded: the statement time limit stops there (the reply is still to be sent). */
  committed?: () => void;
}

interface ExecuteBody {
  sql?: string; params?: unknown; statements?: StatementSpec[]; rows?: RowShape;
  /** Set by the service, never by a client: a Hrana stream turned foreign keys off before this request. */
  foreignKeysOff?: boolean;
  /** Set by the service for a libSQL pipeline, never by a client: what is left of its results' allowance. */
  maxResultBytes?: number;
  /** Set by the service, never by a client: a libSQL write to a database that did not exist, which makes it only if it changes it. */
  transient?: boolean;
}

const turnsOff = (b: ExecuteBody): boolean => b.foreignKeysOff === true || turnsForeignKeysOff(b.sql) || (b.statements ?? []).some((s) => turnsForeignKeysOff(s?.sql));
/** `baseline`: the id of the last migration the content already holds (an import): those up to it are recorded, not run. */
interface MigrateBody { migrations: { id: string; sql: string }[]; dryRun?: boolean; baseline?: string }

/** Where the migrations to run start: after those applied, or after the baseline on a database with none applied. */
const firstToRun = (body: MigrateBody, appliedCount: number): number =>
  Math.max(appliedCount, body.baseline === undefined ? 0 : body.migrations.findIndex((m) => m.id === body.baseline) + 1);

/** Past this, an event carries no changeset and followers take a snapshot (docs/mirrors.md). */
export const MAX_CHANGESET_BYTES = 1024 * 1024;
/** What an event holds besides its changeset (ids, times, the tables it names): kept free under the length limit. */
const EVENT_ROOM_BYTES = 16 * 1024;

// Event ids take 16 random bytes each from a pool: one getrandom call per 256 events instead of one per event.
let idPool = Buffer.alloc(0);
let idAt = 0;
export function eventId(): string {
  if (idAt + 16 > idPool.length) {
    idPool = randomBytes(16 * 256);
    idAt = 0;
  }
  idAt += 16;
  return `evt_${idPool.toString('base64url', idAt - 16, idAt)}`;
}

export function totals(h: DbHandle): { changes: number; schema: number } {
  const r = h.internal('SELECT total_changes() AS c, schema_version AS s FROM pragma_schema_version').get() as { c: number; s: number };
  return { changes: Number(r.c), schema: Number(r.s) };
}

/**
 * The session's changeset, or null when SQLite cannot write one: a table it recorded changes of was dropped or
 * renamed in the same transaction (a table rebuild). The event then says so, and followers take a snapshot.
 */
function changesetOf(session: ReturnType<DbHandle['db']['createSession']>): Uint8Array | null {
  try {
    return session.changeset();
  } catch {
    return null;
  }
}

/**
 * Records a change: bumps the version (inside the session, so followers apply it too) and logs the event. Returns
 * whether the changeset carries the whole change (never with DDL, nor without a session, as for a restore).
 */
export function recordChange(h: DbHandle, ctx: GroupContext, session: ReturnType<DbHandle['db']['createSession']> | null, version: number, event: Record<string, unknown>, watch?: KeyWatch, keepSession = false): boolean {
  // A schema change travels as a fingerprint row, so a follower can tell DDL the changeset cannot carry.
  if (event.schemaChanged) h.internal('INSERT OR REPLACE INTO _scopebase_meta (key, value) VALUES (?, ?)').run(SCHEMA_FINGERPRINT_KEY, schemaFingerprint(h.db));
  h.internal("UPDATE _scopebase_meta SET value = ? WHERE key = 'version'").run(version);
  const tables = (event.changes as { tables: string[] }).tables;
  const captured = session && capturable(h, tables, watch) ? changesetOf(session) : null;
  // A bulk write's changeset would make an event too big to store or send: a snapshot is cheaper. The event is one
  // value of the change log, held to SQLite's length limit (DB_MAX_VALUE_BYTES and its slack): in base64 (4/3) with
  // room for the rest of the event, or a lowered limit refused every bulk write with 507.
  const fits = Math.min(MAX_CHANGESET_BYTES, Math.floor((h.db.limits.length - EVENT_ROOM_BYTES) * 3 / 4));
  const changeset = captured && captured.length <= fits ? captured : null;
  if (!keepSession) session?.close(); // kept by a transaction whose COMMIT may fail and be sent again (tx-ops.ts)
  const at = ctx.committedAt ?? Date.now(); // one reading: the event's time and the log's column agree
  const full = {
    id: eventId(), type: event.type, org: ctx.scope.org, repo: ctx.scope.repo, database: ctx.scope.database,
    version, previousVersion: version - 1, operation: event.operation, committedAt: new Date(at).toISOString(),
    changes: { ...(event.changes as object), tables: asMade(h, tables) }, changeset: changeset?.length ? Buffer.from(changeset.buffer, changeset.byteOffset, changeset.length).toString('base64') : null,
    ...(event.migrations ? { migrations: event.migrations } : {}),
    ...(event.extra as Record<string, unknown> | undefined),
  };
  h.internal('INSERT INTO _scopebase_changes (version, committed_at, event) VALUES (?, ?, ?)').run(version, at, JSON.stringify(full));
  return changeset !== null && !event.schemaChanged; // a changeset never carries DDL
}

/**
 * SPEC 4.5: whether a request whose statements touched rows changed nothing after all (`UPDATE t SET v = v`; a row
 * inserted and deleted again): its changeset is empty and the changeset could have shown every row it wrote (no table
 * without a key, no sqlite_stat1). Schema changes always count, even one undone in the same request.
 */
export function changedNothing(h: DbHandle, session: ReturnType<DbHandle['db']['createSession']>, tables: Iterable<string>, untracked: boolean, watch: KeyWatch): boolean {
  if (untracked || !watch.covers(tables, true)) return false;
  if (anyVirtual(h, tables)) { // its module may hold writes in memory until a savepoint (FTS5's pending terms)
    h.internal('SAVEPOINT _scopebase_flush').run();
    h.internal('RELEASE _scopebase_flush').run();
  }
  const changeset = changesetOf(session);
  return changeset !== null && changeset.length === 0;
}

/** A request's reply; `carried: false` when its change could not travel as a changeset. */
type OneReply = Reply & { carried?: boolean };

function executeOne(h: DbHandle, body: ExecuteBody, ctx: GroupContext, version: number): OneReply {
  const statements = body.statements ?? [{ sql: body.sql!, params: body.params }];
  const budget = new ResultBudget(ctx.maxResultBytes, body.maxResultBytes);
  const before = totals(h);
  const session = h.db.createSession();
  const watch = new KeyWatch(h);
  h.internal('SAVEPOINT request').run();
  const results: string[] = [];
  const tables = new Set<string>();
  let untracked = false;
  let rewrites = false;
  let i = 0;
  try {
    for (; i < statements.length; i++) {
      const out = runWrite(h, statements[i]!, i, body.rows ?? 'arrays', budget, watch);
      results.push(out.text);
      for (const t of out.tables) tables.add(t);
      untracked ||= out.untracked === true;
      rewrites ||= out.rewrites === true;
    }
    endDeferral(h, true);
    const after = totals(h);
    const rowsAffected = after.changes - before.changes;
    // Rows only inserted are a change; rows updated or deleted may be back as they were (a changeset tells).
    const unchanged = after.schema === before.schema && (rowsAffected === 0 || (rewrites && changedNothing(h, session, tables, untracked, watch)));
    // The reply, measured before anything is recorded: one over DB_MAX_RESULT_BYTES leaves nothing.
    const reply = budget.check(`{"results":[${results.join(',')}],"version":${unchanged ? version : version + 1}}`);
    if (unchanged) {
      session.close();
      // Undone, so nothing it moved on the way stays moved (an AUTOINCREMENT counter): the database is as it was.
      if (rowsAffected > 0) h.internal('ROLLBACK TO request').run();
      h.internal('RELEASE request').run();
      return { status: 200, body: reply };
    }
    const carried = recordChange(h, ctx, session, version + 1, { type: 'database.changed', operation: 'execute', changes: { rowsAffected, tables: [...tables].sort() }, schemaChanged: after.schema !== before.schema }, watch);
    h.internal('RELEASE request').run();
    return { status: 200, body: reply, version: version + 1, carried };
  } catch (e) {
    // Past the last statement: the request's end failed it (a key checked at the end, PRAGMA defer_foreign_keys),
    // or its reply as a whole was over DB_MAX_RESULT_BYTES.
    const reply = failure(e, h.sandbox.denied, Math.min(i, statements.length - 1), i < statements.length || replyTooLarge(e) ? undefined : { atCommit: true });
    endDeferral(h, false);
    try { session.close(); } catch { /* closed by recordChange */ }
    if (h.db.isTransaction) { // else a full disk (SQLITE_FULL) or I/O error has rolled it all back already
      h.internal('ROLLBACK TO request').run();
      h.internal('RELEASE request').run();
    }
    return reply;
  }
}

/** Prunes change-log events that no mirror needs and that are past both retention bounds. */
export function prune(h: DbHandle, ctx: GroupContext, version: number): void {
  if (version % 100 !== 0) return;
  const below = Math.min(version - KEEP_EVENTS, ctx.floor ?? Number.MAX_SAFE_INTEGER);
  if (below <= 0) return;
  const cutoff = Date.now() - KEEP_MS;
  // The oldest event goes first: while it is younger than KEEP_MS nothing is due, and the log is not scanned.
  const oldest = h.internal('SELECT committed_at AS at FROM _scopebase_changes ORDER BY version LIMIT 1').get() as { at: number } | undefined;
  if (oldest && Number(oldest.at) < cutoff) h.internal('DELETE FROM _scopebase_changes WHERE version <= ? AND committed_at < ?').run(below, cutoff);
}

/**
 * Runs a group of execute requests in one transaction. Returns one reply per request run, in order: a change no
 * changeset can carry ends the group (the rest are not run, and the pool sends them again), so history can rebuild
 * every version inside a group from the commit before it (history/rebuild.ts).
 */
export function executeGroup(h: DbHandle, bodies: ExecuteBody[], ctx: GroupContext): Reply[] {
  // A request that turns foreign keys off runs alone, with them off (foreign-keys.ts); the pool sends the rest again.
  const first = bodies.findIndex(turnsOff);
  const off = first === 0;
  const group = off ? bodies.slice(0, 1) : first > 0 ? bodies.slice(0, first) : bodies;
  return withForeignKeysOff(h, off, () => runGroup(h, group, ctx, off, group.map((_, i) => i), []));
}

/**
 * The group's token as its commits leave it: `token/i,j,…` lists the requests (their places in the group) that
 * committed. A group may commit more than once under its token (its requests run again alone, or those before one
 * that SQLite rolled back), so after a lost reply the probe tells each caller about its own request.
 */
const groupMark = (token: string, committed: number[]): string => `${token}/${committed.join(',')}`;

/**
 * What the probe reads from `_scopebase_meta('group')`: null when nothing committed under `token`; else which of its
 * requests did, or `all` for a write that is one request (migrate, restore, import, an interactive COMMIT: bare token).
 */
export function committedUnder(value: string | undefined, token: string): number[] | 'all' | null {
  if (value === token) return 'all';
  if (value === undefined || !value.startsWith(`${token}/`)) return null;
  const list = value.slice(token.length + 1);
  return list === '' ? [] : list.split(',').map(Number);
}

/**
 * `at`: each body's place in the group the pool sent; `done`: the places committed so far by this message, each
 * commit's token listing them all (the last one on disk is the whole truth). Only a 200 is listed: a request that
 * failed in its savepoint commits nothing of its own, even when its neighbours commit.
 */
function runGroup(h: DbHandle, bodies: ExecuteBody[], groupCtx: GroupContext, foreignKeysOff: boolean, at: number[], done: number[]): Reply[] {
  h.internal('BEGIN IMMEDIATE').run();
  const ctx = { ...groupCtx, committedAt: Date.now() }; // the group commits as one: its versions share one time
  if (foreignKeysOff) deferForeignKeys(h); // so the request's end checks every key
  const replies: Reply[] = [];
  try {
    const start = h.version();
    let version = start;
    for (const body of bodies) {
      const { carried, ...reply } = executeOne(h, body, ctx, version);
      // SQLite rolled back the whole group under this request: its own ROLLBACK (INSERT OR ROLLBACK, RAISE(ROLLBACK)
      // in a trigger), a full disk or an I/O error. None of it is on disk, and the rest must not run outside a
      // transaction (each would commit on its own). It alone gets its failure (its neighbours all got it, a 409 for
      // an INSERT that broke nothing): those before it run again as a group, those after it go in the next one.
      if (!h.db.isTransaction) {
        const again = replies.length ? runGroup(h, bodies.slice(0, replies.length), groupCtx, foreignKeysOff, at.slice(0, replies.length), done) : [];
        return again.length === replies.length ? [...again, reply] : again; // one ended early: the rest go again
      }
      if (reply.version !== undefined) {
        version = reply.version;
        prune(h, ctx, version);
      }
      replies.push(reply);
      if (carried === false) break;
    }
    const ok = replies.flatMap((r, i) => r.status === 200 ? [at[i]!] : []);
    h.internal("INSERT OR REPLACE INTO _scopebase_meta (key, value) VALUES ('group', ?)").run(groupMark(ctx.token, [...done, ...ok]));
    h.internal('COMMIT').run();
    done.push(...ok);
    ctx.committed?.();
    keepHistory(h, start, version);
    return replies;
  } catch (e) {
    // COMMIT itself failed (disk full, I/O): nothing of the group is on disk, so no request may report success.
    if (h.db.isTransaction) h.internal('ROLLBACK').run();
    if (!isForeignKeyFailure(e)) return bodies.map(() => failure(e, null));
    // A DEFERRABLE INITIALLY DEFERRED foreign key is checked at COMMIT, for the whole group: each request runs again
    // alone, so the one that broke it fails and its neighbours (other callers' writes) commit.
    // Told once all of them ran: the clock still holds the requests after the first to the limit.
    if (bodies.length > 1) {
      const replies = bodies.flatMap((b, i) => runGroup(h, [b], { ...groupCtx, committed: undefined }, foreignKeysOff, [at[i]!], done));
      groupCtx.committed?.();
      return replies;
    }
    const statements = bodies[0]!.statements?.length ?? 1;
    return [failure(new ApiError('constraint_violation', 'FOREIGN KEY constraint failed when the request committed: a deferred foreign key (DEFERRABLE INITIALLY DEFERRED) is checked at the end, and a row this request wrote or left refers to a missing row; nothing of it was applied', { sqliteCode: 'SQLITE_CONSTRAINT_FOREIGNKEY', atCommit: true }), null, statements - 1)];
  }
}

const isForeignKeyFailure = (e: unknown): boolean => (e as { errcode?: unknown } | null)?.errcode === 787; // SQLITE_CONSTRAINT_FOREIGNKEY

const checksum = (sql: string) => createHash('sha256').update(sql, 'utf8').digest('hex');

/** Whether the main schema holds any object of the user's (not an internal or SQLite's own). */
const holdsUserObjects = (h: DbHandle): boolean =>
  h.internal(`SELECT 1 FROM main.sqlite_schema WHERE lower(name) NOT LIKE '\\${INTERNAL_PREFIX.slice(0, -1)}\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' LIMIT 1`).get() !== undefined;

/** SPEC 4.6: the applied list must be a prefix of the request's; pending migrations apply in one transaction. */
export function migrate(h: DbHandle, body: MigrateBody, ctx: GroupContext): Reply {
  // Decided before BEGIN, where the pragma holds: the write lane lets no other migrate in between.
  const appliedCount = Number((h.internal('SELECT count(*) AS n FROM _scopebase_migrations').get() as { n: number }).n);
  const off = body.migrations.slice(firstToRun(body, appliedCount)).some((m) => turnsForeignKeysOff(m.sql));
  return withForeignKeysOff(h, off, () => migrateInTransaction(h, body, ctx));
}

function migrateInTransaction(h: DbHandle, body: MigrateBody, ctx: GroupContext): Reply {
  h.internal('BEGIN IMMEDIATE').run();
  try {
    const applied = h.internal('SELECT id, checksum FROM _scopebase_migrations ORDER BY seq').all() as { id: string; checksum: string }[];
    const requested = body.migrations;
    for (let i = 0; i < applied.length; i++) {
      const a = applied[i]!;
      const r = requested[i];
      const sum = r ? checksum(r.sql) : null;
      if (!r || r.id !== a.id || sum !== a.checksum) {
        h.internal('ROLLBACK').run();
        const why = !r ? `applied migration ${a.id} is missing from the request` : r.id !== a.id ? `migration ${i} is ${a.id} in the database but ${r.id} in the request` : `migration ${a.id} was applied with different SQL`;
        return errorReply({ code: 'migration_conflict', message: why, details: { id: a.id, appliedChecksum: a.checksum, requestedChecksum: sum, ...(r && r.id !== a.id ? { requestedId: r.id } : {}) } });
      }
    }
    const start = firstToRun(body, applied.length);
    // A baseline past what is recorded says the content holds migrations that never ran here: only true of a
    // database with none recorded (an import empties the list); else the list would skip some that did not run.
    if (applied.length > 0 && start > applied.length) {
      h.internal('ROLLBACK').run();
      const latest = applied.at(-1)!;
      return errorReply({ code: 'migration_conflict', message: `baseline ${body.baseline!} records migrations as applied only on a database with none recorded; this one has ${applied.length} (latest ${latest.id}): leave out baseline`, details: { id: latest.id, baseline: body.baseline!, applied: applied.length } });
    }
    const baselined = applied.length === 0 ? requested.slice(0, start) : [];
    // No object of the user's: its content holds no migration, and recording some would have status claim them.
    if (baselined.length > 0 && !holdsUserObjects(h)) {
      h.internal('ROLLBACK').run();
      return errorReply({ code: 'migration_conflict', message: `baseline ${body.baseline!} records migrations a database's content already holds, and this one holds no table, view, index or trigger (was the import made into another database?): import first, or leave out baseline to run them`, details: { baseline: body.baseline!, applied: 0 } });
    }
    const pending = requested.slice(start);
    const version = h.version();
    const alreadyApplied = applied.map((a) => a.id);
    const done = (ids: string[], v: number) => JSON.stringify({
      applied: ids, alreadyApplied, version: v, dryRun: body.dryRun === true,
      ...(body.baseline === undefined ? {} : { baselined: baselined.map((m) => m.id) }),
    });
    if (pending.length === 0 && baselined.length === 0) {
      h.internal('ROLLBACK').run();
      return { status: 200, body: done([], version) };
    }
    const before = totals(h);
    const session = h.db.createSession();
    const tables = new Set<string>();
    // Table rebuilds (create new, copy, drop old, rename) break foreign keys midway: they are checked at the end.
    deferForeignKeys(h);
    const record = h.internal('INSERT INTO _scopebase_migrations (id, checksum, applied_at) VALUES (?, ?, ?)');
    // Inside the session: a cluster follower's copy takes the records from the changeset.
    for (const m of baselined) record.run(m.id, checksum(m.sql), new Date().toISOString());
    let current = pending[0];
    try {
      for (const m of pending) {
        current = m;
        const length = h.writeLength(h.schemaVersion()); // before the sandbox's fields are set: it may prepare
        const ordinary = ordinaryTables(h.db); // a full-text table may take one over (sandbox.ts assertNoTakeover)
        h.sandbox.mode = 'write';
        h.sandbox.denied = null;
        h.sandbox.written = tables;
        h.writing(length, () => execMigration(h, m.sql));
        h.sandbox.mode = 'internal';
        assertSchemaClean(h.db, ordinary);
        record.run(m.id, checksum(m.sql), new Date().toISOString());
      }
      endDeferral(h, true);
    } catch (e) {
      const denied = h.sandbox.denied; // read first: the internal statements below clear it
      session.close();
      endDeferral(h, false);
      if (h.db.isTransaction) h.internal('ROLLBACK').run(); // a full disk (SQLITE_FULL) has rolled it back already
      return failure(e, denied, undefined, current ? { migration: current.id } : undefined);
    }
    // A dry run ran every migration, so it fails exactly where the real run would; then nothing of it stays.
    if (body.dryRun) {
      session.close();
      h.internal('ROLLBACK').run();
      return { status: 200, body: done(pending.map((m) => m.id), version) };
    }
    const rowsAffected = totals(h).changes - before.changes - pending.length - baselined.length; // less our own bookkeeping rows
    // A baseline alone changes no row or schema but the applied list (status, restore, backups hold it): a version,
    // and an event whose `migrations` (what followers replay) is empty, the recorded ones in `baselined`.
    recordChange(h, ctx, session, version + 1, {
      type: 'database.migrated', operation: 'migrate', changes: { rowsAffected, tables: [...tables].sort() },
      migrations: pending.map((m) => ({ id: m.id, sql: m.sql })), schemaChanged: pending.length > 0,
      ...(baselined.length ? { extra: { baselined: baselined.map((m) => m.id) } } : {}),
    });
    h.internal("INSERT OR REPLACE INTO _scopebase_meta (key, value) VALUES ('group', ?)").run(ctx.token);
    h.internal('COMMIT').run();
    ctx.committed?.();
    keepHistory(h, version, version + 1);
    return { status: 200, body: done(pending.map((m) => m.id), version + 1), version: version + 1 };
  } catch (e) {
    if (h.db.isTransaction) h.internal('ROLLBACK').run();
    return failure(e, null);
  }
}
