// An executor process: owns SQLite connections and runs one operation at a time. It can be killed at any
// moment (a runaway statement): SQLite's journal guarantees an interrupted transaction leaves nothing behind.
import { Socket } from 'node:net';
import { flushCompileCache } from 'node:module';
import { encodeFrame, FrameDecoder, type Frame } from './protocol.ts';
import type { DbHandle, ExecutorLimits } from './handles.ts';
import { HandleCache } from './handle-cache.ts';
import { changes, query, snapshot, status } from './read-ops.ts';
import { committedUnder, executeGroup, migrate, type GroupContext } from './write-ops.ts';
import { errorReply, failure, type Reply } from './reply.ts';
import { beginTx, commitTx, execTx, isOpen, rollbackTx, type BeginOptions } from './tx-ops.ts';
import { historyOf, importDatabase, restore } from './history-ops.ts';
import { exportDatabase } from './export-ops.ts';
import { checkSnapshotFile, CopyCache, prepareReplicaFile } from './copy-ops.ts';
import { openReplica } from '../apply-event.ts';
import { dropHistory, historyDirOf } from '../history/archive.ts';
import { prune } from '../history/prune.ts';
import { removeCopy } from '../history/rebuild.ts';
import { mkdirSync, statSync } from 'node:fs';
import type { ChangeEvent } from '../contract.ts';

flushCompileCache(); // now, not at exit: an executor usually ends by SIGKILL or lives as long as the server
// `systemctl stop`, Ctrl-C and many supervisors signal the whole process group: the parent drains, finishes the
// requests in flight (on this process) and then closes it; a stop signal here would fail them instead.
for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => {});
const limits = JSON.parse(process.argv[2] ?? '{}') as ExecutorLimits;
const handles = new HandleCache(limits);
/** A cluster follower's copies this process applied to (op `apply`). */
const copies = new CopyCache();
/** A reference mirror's replicas this process applied to (op `replica.apply`). */
const replicas = new CopyCache(openReplica);
// Without its SQLITE_TMPDIR SQLite falls back to TMPDIR, /var/tmp or /tmp (its files are still counted, by name).
if (limits.tempDir) mkdirSync(limits.tempDir, { recursive: true, mode: 0o700 });
const channel = new Socket({ fd: 3, readable: true, writable: true });
const decoder = new FrameDecoder();

// An idle connection holds ~200 KB of native memory and three file descriptors; reopening one costs ~150 µs.
const { idleCloseMs } = limits;
if (idleCloseMs > 0) {
  setInterval(() => {
    handles.closeIdle(idleCloseMs);
    copies.closeIdle(idleCloseMs);
    replicas.closeIdle(idleCloseMs);
  }, Math.max(10, idleCloseMs / 2)).unref();
}

const notFound = (): Reply => errorReply({ code: 'database_not_found', message: 'the database does not exist' });

function open(path: string, create: boolean): DbHandle | null {
  try {
    return handles.get(path, create);
  } catch (e) {
    if (/unable to open database file/.test(String((e as Error).message))) return null;
    // A new database that could not be set up (a full disk) leaves no empty file; one with content is never touched.
    if (create && emptyFile(path)) unlinkDatabase(path);
    throw e;
  }
}

function emptyFile(path: string): boolean {
  try {
    return statSync(path).size === 0;
  } catch {
    return false;
  }
}

function unlinkDatabase(path: string): void {
  handles.forget(path);
  copies.forget(path);
  removeCopy(path);
  if (limits.history) dropHistory(limits.history, path);
}

/**
 * Tells the parent that the running message starts a step: a statement of an imported SQL text (held to the
 * statement limit) or, `done`, the rest. Every step is held to what is left of the message's own budget too, so
 * many statements cannot add up past it. The write leaves at once: the channel is uncorked.
 */
function budgetStep(statementMs: number, budgetMs: number): (done?: boolean) => void {
  const end = performance.now() + budgetMs;
  return (done) => {
    const left = Math.max(1, Math.ceil(end - performance.now()));
    channel.write(encodeFrame(0, done || left <= statementMs ? { budget: left } : { budget: statementMs, statement: true }));
  };
}

/** Tells the parent that the running message committed: the rest (history, its reply) is not statement time. */
const committed = (): void => {
  channel.write(encodeFrame(0, { committed: true }));
};

function handle(frame: Frame): Buffer {
  const h = frame.header as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  const path = h.path as string;
  switch (h.op) {
    case 'export': {
      const db = open(path, false);
      if (!db) return encodeFrame(frame.seq, { s: 404 }, notFound().body);
      const reply = exportDatabase(db, h.target, h.format);
      return encodeFrame(frame.seq, { s: reply.status }, reply.body);
    }
    case 'query': case 'status': case 'changes': case 'snapshot': {
      let db: DbHandle | null;
      let once = false;
      try {
        db = open(path, false);
      } catch (e) {
        db = h.op === 'snapshot' ? null : handles.readWhileDiskFull(path, e); // reads go on while the disk is full
        if (!db) throw e;
        once = true;
      }
      const body = h.op === 'query' ? JSON.parse(frame.body.toString('utf8')) : null;
      // A libSQL client describes statements before its first write, and reads a database not made yet: as an empty one.
      if (!db && (body?.describe !== undefined || body?.asEmpty === true)) db = handles.empty();
      if (!db) return encodeFrame(frame.seq, { s: 404 }, notFound().body);
      try {
        const reply = h.op === 'query' ? query(db, body, limits.maxResultBytes)
          : h.op === 'status' ? status(db, historyOf(db))
          : h.op === 'changes' ? changes(db, h.since, h.limit, { shipment: h.shipment === true, schema: h.schema === true })
          : snapshot(db, h.target);
        return encodeFrame(frame.seq, { s: reply.status }, reply.body);
      } finally {
        if (once) db.close();
      }
    }
    case 'execute': case 'migrate': {
      const db = open(path, h.create === true);
      if (!db) return encodeFrame(frame.seq, { s: 404 }, notFound().body);
      const ctx: GroupContext = { scope: h.scope, maxResultBytes: limits.maxResultBytes, floor: h.floor ?? null, token: h.token, committed };
      let replies: Reply[];
      const bodies: { transient?: boolean }[] = [];
      if (h.op === 'migrate') {
        replies = [migrate(db, JSON.parse(frame.body.toString('utf8')), ctx)];
      } else {
        let off = 0;
        for (const len of h.lens as number[]) {
          bodies.push(JSON.parse(frame.body.toString('utf8', off, off + len)));
          off += len;
        }
        replies = executeGroup(db, bodies, ctx);
      }
      // A database whose first write failed leaves no file behind; one that succeeded without changing anything
      // (an execute of SELECT 1) exists, at version 0 (SPEC 4.4: execute creates its database).
      // A migrate that applied nothing (a dry run) leaves no database either.
      // A libSQL write to a database that did not exist (`transient`, set by the service) makes it only if it changed it.
      const made = h.op === 'execute' ? replies.some((r, i) => r.status === 200 && (r.version !== undefined || bodies[i]?.transient !== true)) : replies.some((r) => r.version !== undefined);
      if (h.create === true && !made) unlinkDatabase(path);
      const texts = replies.map((r) => Buffer.from(r.body));
      return encodeFrame(frame.seq, { items: replies.map((r, i) => ({ s: r.status, v: r.version, n: texts[i]!.length })) }, Buffer.concat(texts));
    }
    case 'restore': case 'import': {
      const db = open(path, h.create === true);
      if (!db) return encodeFrame(frame.seq, { s: 404 }, notFound().body);
      const ctx: GroupContext = { scope: h.scope, maxResultBytes: limits.maxResultBytes, floor: h.floor ?? null, token: h.token };
      const reply = h.op === 'restore'
        ? restore(db, JSON.parse(frame.body.toString('utf8')), ctx)
        : importDatabase(db, { ...JSON.parse(frame.body.toString('utf8')), created: h.create === true, database: h.scope.database }, ctx, limits, budgetStep(h.statementMs, h.budgetMs));
      if (h.create === true && reply.version === undefined) unlinkDatabase(path);
      return encodeFrame(frame.seq, { items: [{ s: reply.status, v: reply.version, n: Buffer.byteLength(reply.body) }] }, reply.body);
    }
    case 'probe': {
      // After a lost reply: did the write with this token commit, and which of its group's requests?
      const db = open(path, false);
      // A database killed while it was being made (an interactive transaction's BEGIN) may lack its internal tables.
      const made = db?.internal("SELECT 1 FROM sqlite_schema WHERE name = '_scopebase_meta'").get() !== undefined;
      const row = made ? db!.internal("SELECT value FROM _scopebase_meta WHERE key = 'group'").get() as { value: string } | undefined : undefined;
      const under = committedUnder(row?.value, h.token);
      const committed = under === 'all' || (under !== null && under.length > 0);
      const version = made ? db!.version() : 0;
      // The group created the database and was killed before it committed: no file is left, as after a failed first write.
      if (db && !committed && h.created === true && version === 0) unlinkDatabase(path);
      return encodeFrame(frame.seq, { committed, version, ...(Array.isArray(under) ? { requests: under } : {}) });
    }
    case 'tx.begin': case 'tx.exec': case 'tx.commit': case 'tx.rollback': {
      const reply = h.op === 'tx.begin'
        ? beginTx(h.tx, path, h.create === true, { scope: h.scope, maxResultBytes: limits.maxResultBytes, floor: h.floor ?? null, token: h.token }, limits, frame.body.length > 0 ? JSON.parse(frame.body.toString('utf8')) as BeginOptions : {})
        : h.op === 'tx.exec' ? execTx(h.tx, JSON.parse(frame.body.toString('utf8')), limits.maxResultBytes)
        : h.op === 'tx.commit' ? commitTx(h.tx, committed) : rollbackTx(h.tx);
      // A transaction that created its database and ended without a change leaves none, as a first write does (one
      // SQLite rolled back under a statement too); so does one that could not begin on it (a full disk: the file may
      // be made, but without its internal tables).
      // One killed with its process is removed by the probe the pool sends then (`created`).
      // A COMMIT that failed may leave the transaction open (a deferred foreign key): then nothing ended.
      const ended = h.op === 'tx.commit' || h.op === 'tx.rollback' ? reply.version === undefined && !isOpen(h.tx) : h.op === 'tx.begin' ? reply.status !== 200 : 'ended' in reply;
      if (h.create === true && ended) unlinkDatabase(path);
      return encodeFrame(frame.seq, { s: reply.status, v: reply.version }, reply.body);
    }
    case 'apply': {
      // A cluster follower's copy: the primary's events, applied in one transaction (copy-ops.ts). The body is parsed
      // here only: up to 256 MiB of the tenant's changes would hold the node's event loop.
      const events = CopyCache.shipment(frame.body);
      if (events === null) return encodeFrame(frame.seq, { s: 400 }, errorReply({ code: 'invalid_request', message: 'the body must be a JSON object whose events are a non-empty array' }).body);
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify(copies.apply(path, events)));
    }
    case 'copy.state':
      // A cluster follower's handshake: opening the copy parses the tenant's schema (copy-ops.ts).
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify(copies.state(path)));
    case 'copy.check':
      // A snapshot a follower received, before the node renames it over its copy: opened here, and closed.
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify(checkSnapshotFile(path)));
    case 'replica.apply': {
      // A reference mirror's replica: one event, applied in one transaction (copy-ops.ts).
      const outcome = replicas.applyToReplica(path, JSON.parse(frame.body.toString('utf8')) as ChangeEvent);
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify(outcome));
    }
    case 'replica.version':
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify(replicas.version(path)));
    case 'replica.prepare':
      // A downloaded snapshot, before the mirror renames it into place: opened here, and closed.
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify(prepareReplicaFile(path)));
    case 'history.prune':
      // The background sweep's visit, in the database's lane (no write or restore of it runs meanwhile): history/prune.ts.
      return encodeFrame(frame.seq, { s: 200 }, JSON.stringify({ freed: limits.history ? prune(limits.history, historyDirOf(limits.history, path), true) : 0 }));
    case 'forget':
      handles.forget(path);
      copies.forget(path);
      replicas.forget(path);
      return encodeFrame(frame.seq, { s: 200 });
    case 'close':
      handles.closeAll();
      copies.closeAll();
      replicas.closeAll();
      return encodeFrame(frame.seq, { s: 200 });
    default:
      return encodeFrame(frame.seq, { s: 500 }, errorReply({ code: 'internal', message: `unknown executor op ${h.op}` }).body);
  }
}

channel.on('data', (chunk: Buffer) => {
  // Each reply leaves before the next message runs. Replies of one chunk used to leave together, at its end: a quick
  // read's reply then waited behind a runaway sent after it, and the parent, seeing it unanswered, stopped the process
  // at the read's limit as if the read were the runaway (422 query_timeout for `SELECT 1`, and the runaway ran again).
  for (const frame of decoder.push(chunk)) {
    let out: Buffer;
    try {
      out = handle(frame);
    } catch (e) {
      const reply = failure(e, null); // opening the file failed: damaged (500), a full disk (507), …
      out = encodeFrame(frame.seq, { s: reply.status }, reply.body);
    }
    channel.write(out);
  }
});
channel.on('end', () => {
  handles.closeAll();
  copies.closeAll();
  replicas.closeAll();
  process.exit(0);
});
// The parent went away abruptly (ECONNRESET, EPIPE): nothing is left to answer, and an unhandled 'error' event would
// print a stack for every executor. SQLite's journal makes an exit at any point safe.
channel.on('error', () => process.exit(0));
// Ready: the parent starts a statement's clock from here, so a slow start (a loaded machine) is not its running time.
channel.write(encodeFrame(0, { ready: true }));
