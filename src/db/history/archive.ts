// Keeps a database's history as it is written: after every commit the executor appends the page images that commit
// wrote to the log of the current segment (log.ts). Runs inside the writer, synchronously after COMMIT, while no
// other connection can write or checkpoint (writes are serialized per database; only a committing connection
// checkpoints), so the log file it reads holds exactly what the commit wrote.
import { closeSync, copyFileSync, fstatSync, mkdirSync, openSync, rmSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DatabaseSync } from 'node:sqlite';
import { appendRecord, lastRecord, segmentName, segments } from './log.ts';
import { prune } from './prune.ts';
import { readCommitted, readWalHeader } from './wal.ts';

export interface HistoryOptions {
  /** Where histories live (DATA_DIR/history) and where databases live (DATA_DIR/db): one mirrors the other. */
  root: string;
  dbRoot: string;
  /** Versions of at least this many days stay restorable (DB_HISTORY_DAYS). */
  days: number;
  /** A database's history is cut (oldest segments first) past this many bytes (DB_HISTORY_MAX_BYTES). */
  maxBytes: number;
  /**
   * The repo's histories together, past which its oldest history goes, whichever database's (DB_HISTORY_MAX_BYTES_PER_REPO,
   * prune.ts): 64 databases of 8 GiB each could fill a disk.
   */
  repoMaxBytes: number;
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

const closeQuietly = (fd: number | null) => {
  if (fd !== null) try { closeSync(fd); } catch { /* already closed */ }
};

/**
 * One database's archiver, owned by its open connection: it keeps the log and the history file open between
 * commits (a commit costs two reads and one write). The log file outlives no connection of the database, so an
 * open descriptor never points at a deleted log.
 */
export class Archiver {
  private readonly opts: HistoryOptions;
  private readonly dbPath: string;
  private readonly dir: string;
  private cursor: Cursor | null = null;
  private walFd: number | null = null;
  private log: { segment: string; fd: number } | null = null;

  constructor(opts: HistoryOptions, dbPath: string) {
    this.opts = opts;
    this.dbPath = dbPath;
    this.dir = historyDirOf(opts, dbPath);
  }

  /**
   * Records the commit that took the database from `prevVersion` to `version` at `committedAt` (ms). When the record would not follow on
   * from the last one (no history yet, or a commit went unrecorded: a process killed right after COMMIT), a new
   * segment starts from a copy of the database file plus this log generation's frames: exact all the same.
   */
  record(prevVersion: number, version: number, committedAt: number, prevCommittedAt: () => number | null = () => null): void {
    this.walFd ??= openSync(`${this.dbPath}-wal`, 'r');
    // The sweep dropped the segment it was appending to (an idle database's, for the repo's cap): start anew.
    if (this.log && fstatSync(this.log.fd).nlink === 0) this.forgetLog();
    const header = readWalHeader(this.walFd);
    if (!header) return; // a commit always leaves its log: nothing to read means nothing can be kept exactly
    // Another connection (another process, an interactive transaction) may have recorded commits since.
    const last = this.cursor?.version === prevVersion ? this.cursor : loadCursor(this.dir);
    const follows = last !== null && last.version === prevVersion;
    const fresh = !follows || (last.logBytes > MIN_SEGMENT_LOG && last.logBytes > statSync(this.dbPath).size);
    const sameLog = follows && last.salt1 === header.salt1 && last.salt2 === header.salt2;
    const commit = readCommitted(this.walFd, header, !fresh && sameLog ? last.walEnd : 32);
    let segment = last?.segment;
    let logBytes = last?.logBytes ?? 0;
    if (fresh || !segment) {
      const all = segments(this.dir);
      segment = segmentName(all.length ? Number(all.at(-1)) + 1 : 1);
      mkdirSync(join(this.dir, segment), { recursive: true, mode: 0o700 });
      // The file plus every frame of this log generation is the database now: nothing checkpoints it meanwhile.
      copyFileSync(this.dbPath, join(this.dir, segment, 'base'));
      logBytes = 0;
    }
    if (this.log?.segment !== segment) {
      closeQuietly(this.log?.fd ?? null);
      this.log = { segment, fd: openSync(join(this.dir, segment, 'log'), 'a', 0o600) };
    }
    // The first commit on a checkpointed file (a restored backup, a database from before history): the base alone
    // is the version before it, which is kept as a record with no pages, so that version stays restorable too.
    const prevAt = fresh && prevVersion > 0 && baseVersion(join(this.dir, segment, 'base')) === prevVersion ? prevCommittedAt() : null;
    if (prevAt !== null) {
      logBytes += appendRecord(this.log.fd, {
        version: prevVersion, prevVersion, committedAt: prevAt, pageSize: header.pageSize,
        dbPages: Math.ceil(statSync(join(this.dir, segment, 'base')).size / header.pageSize), salt1: header.salt1, salt2: header.salt2, walEnd: 32,
      }, []);
    }
    logBytes += appendRecord(this.log.fd, {
      version, prevVersion, committedAt, pageSize: header.pageSize, dbPages: commit.dbPages || Math.ceil(statSync(this.dbPath).size / header.pageSize),
      salt1: header.salt1, salt2: header.salt2, walEnd: commit.end,
    }, commit.frames);
    this.cursor = { segment, version, salt1: header.salt1, salt2: header.salt2, walEnd: commit.end, logBytes };
    if (fresh) prune(this.opts, this.dir, false);
  }

  /** Forgets where it was: the next commit finds its place from the files (after a failure). */
  reset(): void {
    this.cursor = null;
  }

  private forgetLog(): void {
    closeQuietly(this.log?.fd ?? null);
    this.log = null;
    this.cursor = null;
  }

  close(): void {
    closeQuietly(this.walFd);
    this.walFd = null;
    this.forgetLog();
  }
}

/** The version a base file holds by itself (its WAL not applied), or null when it cannot be read. */
function baseVersion(base: string): number | null {
  const url = pathToFileURL(base);
  url.searchParams.set('immutable', '1'); // the file alone: no -wal or -shm is looked for or made beside the copy
  let db: DatabaseSync | undefined;
  try {
    db = new DatabaseSync(url, { readOnly: true });
    return Number((db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number } | undefined)?.value ?? NaN);
  } catch {
    return null;
  } finally {
    db?.close();
  }
}

/** Forgets a database's history (the database itself is gone). */
export function dropHistory(opts: HistoryOptions, dbPath: string): void {
  rmSync(historyDirOf(opts, dbPath), { recursive: true, force: true });
}
