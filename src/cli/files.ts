// Paths a user names (a file to import, --output, --file) and what a file-system failure on one says: the one place
// errno codes become words, so every command reports them alike, in one line (SPEC 10).
import { accessSync, closeSync, constants, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, statSync } from 'node:fs';
import { dirname, resolve, sep } from 'node:path';
import { dataDirOf } from '../shared/config.ts';
import { realPath } from '../shared/paths.ts';
import { CliError, EXIT } from './output.ts';

/** SQLite's "not a database" (26) or "damaged" (11, with its extended codes): a file SQLite cannot read soundly. */
export function isUnsoundSqlite(e: unknown): boolean {
  const errcode = (e as { errcode?: unknown } | null)?.errcode;
  return typeof errcode === 'number' && (errcode === 26 || (errcode & 0xff) === 11);
}

/** A file-system or SQLite failure as what happened, in words an operator acts on. */
export function describeIoError(e: unknown, what: string): string {
  const err = e as NodeJS.ErrnoException & { errcode?: number };
  const code = err.code;
  if (code === 'ENOSPC' || err.errcode === 13) return `the disk is full: ${what}`;
  if (code === 'EDQUOT') return `the disk quota is exceeded: ${what}`;
  if (code === 'EROFS') return `the file system is read-only: ${what} (${code})`;
  if (code === 'EACCES' || code === 'EPERM') return `no permission: ${what} (${code})`;
  if (code === 'ENOENT') return `no such file or folder: ${what} (${code})`;
  if (code === 'ENOTDIR') return `a part of the path is a file, not a folder: ${what} (${code})`;
  if (code === 'EISDIR') return `a folder where a file was meant: ${what} (${code})`;
  if (err.errcode === 14) return `cannot open the file: ${what} (${err.message})`;
  if (isUnsoundSqlite(e)) return `not a sound SQLite database: ${what} (${err.message})`;
  return `${what}: ${code !== undefined && /^E[A-Z]+$/.test(code) ? code : err.message}`; // an errno name, else SQLite's words (not ERR_SQLITE_ERROR)
}

/** A file the user named could not be read: a bad argument (exit 2). */
export function unreadable(e: unknown, label: string, path: string): CliError {
  return new CliError(EXIT.usage, `cannot read ${label}: ${describeIoError(e, path)}`);
}

/** A file to read (import's file, execute --file) must be there and be a file; checked before the server is asked. */
export function checkInputFile(path: string, label: string): void {
  let folder: boolean;
  try {
    folder = statSync(path).isDirectory();
    accessSync(path, constants.R_OK);
  } catch (e) {
    throw unreadable(e, label, path);
  }
  if (folder) throw new CliError(EXIT.usage, `cannot read ${label}: ${path} is a folder: name a file`);
}

/** A file to write (export --output): a new or existing file in an existing folder this user may write. */
export function checkOutputFile(path: string, label: string): void {
  const full = resolve(path);
  const fail = (why: string) => new CliError(EXIT.usage, `cannot write ${label} ${path}: ${why}`);
  let target;
  try {
    target = statSync(full, { throwIfNoEntry: false });
    if (target?.isDirectory()) throw fail('it is a folder: name a file in it');
    const folder = statSync(dirname(full), { throwIfNoEntry: false });
    if (folder === undefined) throw fail(`there is no folder ${dirname(full)}: make it first`);
    if (!folder.isDirectory()) throw fail(`${dirname(full)} is a file, not a folder`);
    accessSync(target ? full : dirname(full), constants.W_OK);
  } catch (e) {
    if (e instanceof CliError) throw e;
    throw fail(describeIoError(e, full));
  }
}

/** A failure while writing or reading a user's file mid-way (the disk filled): the operation failed (exit 1). */
export function ioFailure(e: unknown, doing: string, path: string): CliError {
  return new CliError(EXIT.refused, `${doing} failed: ${describeIoError(e, path)}`);
}

// The folders and files `backup` and `restore` write (backup.ts, restore.ts).

/** DATA_DIR as the server reads it (without generating keys into it as loadConfig would), symlinks resolved. */
export function realDataDir(env: Record<string, string | undefined>): string {
  return realPath(dataDirOf(env));
}

/** a is b or lies inside it; both real paths, so a symlink cannot hide DATA_DIR. */
export const inside = (a: string, b: string) => a === b || a.startsWith(b + sep);

export function isEmptyDir(path: string): boolean {
  return statSync(path).isDirectory() && readdirSync(path).length === 0;
}

export function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** mkdir -p by hand: Node's recursive mkdir never returns for some paths (e.g. under /proc). */
export function makeDirs(path: string): void {
  const missing: string[] = [];
  for (let d = path; !existsSync(d) && dirname(d) !== d; d = dirname(d)) missing.push(d);
  for (const d of missing.reverse()) mkdirSync(d, { mode: 0o700 });
}

/** Makes the folders a file is to be written in. */
export function makeParent(path: string): void {
  makeDirs(dirname(path));
}
