// One process at a time on each part's data in DATA_DIR (docs/deploy.md, "One process per DATA_DIR").
// The lock is SQLite's exclusive POSIX lock on DATA_DIR/locks/{part}.lock, held by an open connection: the kernel
// drops it when the process ends, kill -9 included, so no stale lock can refuse a restart. The `.owner` file beside
// it only names the holder in the message; it never decides anything.
import { existsSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';

/** The parts that own files in DATA_DIR; a proxy that forwards to `serve db` and `serve account` owns none. */
export type DataPart = 'db' | 'account' | 'mirror';

/** In this order always, so two processes taking several never wait on each other in a circle. */
export const DATA_PARTS: readonly DataPart[] = ['db', 'account', 'mirror'];

const OWNS: Record<DataPart, string> = {
  db: 'databases: db/, history/, mirrors.sqlite',
  account: 'account stores: accounts.sqlite, credentials.sqlite',
  mirror: 'reference mirror replicas: mirror/',
};

/** How long a start waits for a holder still exiting (a kill -9 just sent, a stop at its end) before it refuses. */
export const START_WAIT_MS = 2000;

const SQLITE_BUSY = 5;

/** Connections holding a lock: referenced here so the garbage collector never closes one (and drops its lock). */
const held = new Set<DatabaseSync>();

export const lockFolder = (dataDir: string) => join(dataDir, 'locks');
const lockFile = (dataDir: string, part: DataPart) => join(lockFolder(dataDir), `${part}.lock`);
const ownerFile = (dataDir: string, part: DataPart) => join(lockFolder(dataDir), `${part}.owner`);

/** Another process holds `part`'s lock on `dataDir`. */
export class DataDirInUse extends Error {
  readonly dataDir: string;
  readonly part: DataPart;
  /** The holder's command (`scopebase start`, `scopebase restore`, …), when its owner file names a live process. */
  readonly holder: string | null;

  constructor(dataDir: string, part: DataPart) {
    const owner = readOwner(dataDir, part); // the pid only when the owner file names a live process
    const holder = owner ? `\`${owner.command}\` (pid ${owner.pid})` : 'another scopebase process';
    super(`${dataDir} is in use: its ${part} part (${OWNS[part]}) is held by ${holder}`);
    this.dataDir = dataDir;
    this.part = part;
    this.holder = owner?.command ?? null;
  }
}

export interface DataLock {
  /** Lets go of every lock (a server's close; otherwise the process's end does it). */
  release(): void;
}

export interface LockOptions {
  /** Written next to the lock for another process's message, e.g. "scopebase serve db"; none: nothing written. Removed at release. */
  holder?: string;
  /** How long to wait for a holder to let go before refusing (SQLite's busy timeout). */
  waitMs?: number;
  /** Only the parts whose lock file exists (a restore: it must not add files to a DATA_DIR it finds). */
  existingOnly?: boolean;
}

/**
 * Takes the locks of `parts` on `dataDir`, all or none. Throws DataDirInUse when another process holds one, and
 * the file system's error when a lock file cannot be made (a read-only or full disk).
 */
export function lockData(dataDir: string, parts: readonly DataPart[], opts: LockOptions = {}): DataLock {
  const taken: { part: DataPart; db: DatabaseSync }[] = [];
  const release = () => {
    for (const { part, db } of taken) {
      if (opts.holder !== undefined) removeOwner(dataDir, part); // while the lock is still held: no one else wrote it
      held.delete(db);
      if (db.isOpen) db.close();
    }
  };
  try {
    for (const part of DATA_PARTS.filter((p) => parts.includes(p))) {
      const path = lockFile(dataDir, part);
      if (opts.existingOnly && !existsSync(path)) continue;
      mkdirSync(lockFolder(dataDir), { recursive: true, mode: 0o700 });
      taken.push({ part, db: lockOne(dataDir, part, opts.waitMs ?? 0) });
      if (opts.holder !== undefined) writeOwner(dataDir, part, opts.holder);
    }
  } catch (e) {
    release();
    throw e;
  }
  return { release };
}

function lockOne(dataDir: string, part: DataPart, waitMs: number): DatabaseSync {
  const db = new DatabaseSync(lockFile(dataDir, part), { timeout: waitMs });
  try {
    // EXCLUSIVE locking mode keeps the lock the first transaction takes until the connection closes.
    db.exec('PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=MEMORY; BEGIN EXCLUSIVE; COMMIT');
  } catch (e) {
    db.close();
    if (((e as { errcode?: number }).errcode ?? 0) % 256 === SQLITE_BUSY) throw new DataDirInUse(dataDir, part);
    throw e;
  }
  held.add(db);
  return db;
}

/** The holder's pid and command, for the message only; best effort (a full disk must not stop the start). */
function writeOwner(dataDir: string, part: DataPart, command: string): void {
  try {
    writeFileSync(ownerFile(dataDir, part), JSON.stringify({ pid: process.pid, command, since: new Date().toISOString() }) + '\n', { mode: 0o600 });
  } catch {
    // Without it the message says "another scopebase process" without a pid.
  }
}

/** The owner file, if it names this process (a restore moved DATA_DIR aside: the one there now is not its own). */
function removeOwner(dataDir: string, part: DataPart): void {
  try {
    const o = JSON.parse(readFileSync(ownerFile(dataDir, part), 'utf8')) as { pid?: unknown };
    if (o.pid === process.pid) unlinkSync(ownerFile(dataDir, part));
  } catch {
    // none, or not readable: nothing of ours to remove
  }
}

function readOwner(dataDir: string, part: DataPart): { pid: number; command: string } | null {
  let o: { pid?: unknown; command?: unknown };
  try {
    o = JSON.parse(readFileSync(ownerFile(dataDir, part), 'utf8')) as typeof o;
  } catch {
    return null;
  }
  const pid = o.pid;
  if (typeof pid !== 'number' || !Number.isSafeInteger(pid) || pid <= 0 || typeof o.command !== 'string' || !alive(pid)) return null;
  return { pid, command: o.command.slice(0, 80) };
}

/** A pid left behind by a holder that died names nobody (EPERM: alive, under another user). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
