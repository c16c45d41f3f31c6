// Keeps a database's history as it is written: after every commit the executor appends the page images that commit
// wrote to the log of the current segment (log.ts). Runs inside the writer, synchronously after COMMIT, while no
// other connection can write or checkpoint (writes are serialized per database; only a committing connection
// checkpoints), so the log file it reads holds exactly what the commit wrote.
import { copyFileSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { appendRecord, lastRecord, readRecords, segmentName, segments } from './log.ts';
import { readCommitted, readWalHeader } from './wal.ts';

export interface HistoryOptions {
  /** Where histories live (DATA_DIR/history) and where databases live (DATA_DIR/db): one mirrors the other. */
  root: string;
  dbRoot: string;
  /** Versions of at least this many days stay restorable (DB_HISTORY_DAYS). */
  days: number;
  /** A database's history is cut (oldest segments first) past this many bytes (DB_HISTORY_MAX_BYTES). */
  maxBytes: number;
}

/** Where the archive left off, so the next commit's frames can be found. */
export interface Cursor { segment: string; version: number; salt1: number; salt2: number; walEnd: number; logBytes: number }

/** A segment's log is closed, and a new base taken, once it outgrows the database (at least 16 MiB): restores stay quick. */
const MIN_SEGMENT_LOG = 16 << 20;

export function historyDirOf(opts: HistoryOptions, dbPath: string): string {
  return join(opts.root, relative(opts.dbRoot, dbPath).replace(/\.sqlite$/, ''));
}

function loadCursor(dir: string): Cursor | null {
  const segment = segments(dir).at(-1);
  const last = segment ? lastRecord(join(dir, segment)) : null;
  if (!segment || !last) return null;
  const m = last.meta;
  return { segment, version: m.version, salt1: m.salt1, salt2: m.salt2, walEnd: m.walEnd, logBytes: last.logBytes };
}

/**
 * Records the commit that took the database from `prevVersion` to `version`. When the record would not follow on
 * from the last one (no history yet, or a commit went unrecorded: a process killed right after COMMIT), a new
 * segment starts from a copy of the database file plus this log generation's frames: exact all the same.
 */
export function archiveCommit(opts: HistoryOptions, dbPath: string, cursor: Cursor | null, prevVersion: number, version: number): Cursor | null {
  const dir = historyDirOf(opts, dbPath);
  const walPath = `${dbPath}-wal`;
  const header = readWalHeader(walPath);
  if (!header) return cursor; // a commit always leaves its log: nothing to read means nothing can be kept exactly
  // Another connection (another process, an interactive transaction) may have recorded commits since.
  const last = cursor?.version === prevVersion ? cursor : loadCursor(dir);
  const dbBytes = statSync(dbPath).size;
  const follows = last !== null && last.version === prevVersion;
  const fresh = !follows || last.logBytes > Math.max(MIN_SEGMENT_LOG, dbBytes);
  const sameLog = follows && last.salt1 === header.salt1 && last.salt2 === header.salt2;
  const from = !fresh && sameLog ? last.walEnd : 32;
  const commit = readCommitted(walPath, header, from);
  let segment = last?.segment;
  let logBytes = last?.logBytes ?? 0;
  if (fresh || !segment) {
    const all = segments(dir);
    segment = segmentName(all.length ? Number(all.at(-1)) + 1 : 1);
    mkdirSync(join(dir, segment), { recursive: true, mode: 0o700 });
    // The file plus every frame of this log generation is the database now: nothing checkpoints it meanwhile.
    copyFileSync(dbPath, join(dir, segment, 'base'));
    logBytes = 0;
  }
  logBytes += appendRecord(join(dir, segment), {
    version, prevVersion, committedAt: Date.now(), pageSize: header.pageSize, dbPages: commit.dbPages || Math.ceil(dbBytes / header.pageSize),
    salt1: header.salt1, salt2: header.salt2, walEnd: commit.end,
  }, commit.frames);
  if (fresh) prune(opts, dir);
  return { segment, version, salt1: header.salt1, salt2: header.salt2, walEnd: commit.end, logBytes };
}

function segmentBytes(dir: string): number {
  let n = 0;
  for (const f of ['base', 'log']) n += statSync(join(dir, f), { throwIfNoEntry: false })?.size ?? 0;
  return n;
}

/** Drops old segments: those whose successor began before the window (kept states are all later), and past the size cap. */
export function prune(opts: HistoryOptions, dir: string): void {
  const all = segments(dir);
  const cutoff = Date.now() - opts.days * 86_400_000;
  let total = all.reduce((n, s) => n + segmentBytes(join(dir, s)), 0);
  for (let i = 0; i < all.length - 1; i++) {
    const next = readRecords(join(dir, all[i + 1]!))[0];
    const outOfWindow = next !== undefined && next.committedAt < cutoff;
    if (!outOfWindow && total <= opts.maxBytes) break;
    total -= segmentBytes(join(dir, all[i]!));
    rmSync(join(dir, all[i]!), { recursive: true, force: true });
  }
}

/** Forgets a database's history (the database itself is gone). */
export function dropHistory(opts: HistoryOptions, dbPath: string): void {
  rmSync(historyDirOf(opts, dbPath), { recursive: true, force: true });
}
