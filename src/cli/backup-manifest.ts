// A backup's manifest.json (SPEC 9.2): what each file is, its size and SHA-256; and the checks that `verify`
// and `restore` run against it before trusting a single byte.
import { closeSync, existsSync, lstatSync, openSync, readdirSync, readFileSync, readSync, statSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { join, normalize, isAbsolute, sep } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { CliError, EXIT } from './output.ts';
import { describeIoError } from './files.ts';

export const MANIFEST = 'manifest.json';
export const FORMAT = 'scopebase-backup';
/** 2: the manifest carries its own checksum (since 2026-11-26); version 1 manifests still verify and restore. */
export const FORMAT_VERSION = 2;
const READS = [1, FORMAT_VERSION];

export type FileKind = 'database' | 'account' | 'credentials' | 'mirror' | 'key';

/** The stores beside the databases, and the development keys generated into DATA_DIR (config.ts). */
export const STORES: { file: string; kind: FileKind }[] = [
  { file: 'accounts.sqlite', kind: 'account' },
  { file: 'credentials.sqlite', kind: 'credentials' },
  { file: 'mirrors.sqlite', kind: 'mirror' },
  { file: 'runtime-root.key', kind: 'key' },
  { file: 'account-encryption.key', kind: 'key' },
];

export interface ManifestFile {
  /** Relative to the backup dir and to DATA_DIR alike, with `/` separators. */
  path: string;
  kind: FileKind;
  scope?: { org: string; repo: string; database: string };
  /** The database's version (SPEC 4.5) as read from the copy. */
  version?: number;
  /** Which file the copy came from (dev:ino:birth): a database made again under the same name is another file. */
  source?: string;
  size: number;
  sha256: string;
}

export interface Manifest {
  format: typeof FORMAT;
  formatVersion: number;
  createdAt: string;
  /** The backup the unchanged databases were reused from, when taken with --incremental. */
  incrementalFrom?: string;
  files: ManifestFile[];
  /** Repos' databases that were damaged (SQLite could not read them) and are not in this backup, with why. */
  skipped?: { path: string; problem: string }[];
  /** SHA-256 of the manifest's compact JSON without this field, written last (format 2). */
  manifestSha256?: string;
}

const digest = (text: string) => createHash('sha256').update(text).digest('hex');

/** The manifest as written: with its own checksum, so an edit (a file's entry taken out, a kind changed) shows. */
export function manifestText(m: Omit<Manifest, 'manifestSha256'>): string {
  return JSON.stringify({ ...m, manifestSha256: digest(JSON.stringify(m)) }, null, 2) + '\n';
}

export const isSqlite = (f: ManifestFile) => f.kind !== 'key';

export function sha256File(path: string): string {
  const hash = createHash('sha256');
  const buf = Buffer.allocUnsafe(1 << 20);
  const fd = openSync(path, 'r');
  try {
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      hash.update(buf.subarray(0, n));
    }
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

/** A manifest path may not leave the backup (or DATA_DIR) it is joined to. */
function safeRelative(p: unknown): p is string {
  if (typeof p !== 'string' || p === '' || isAbsolute(p) || p.includes('\\')) return false;
  const n = normalize(p);
  return n === p.split('/').join(sep) && !n.split(sep).includes('..');
}

export function readManifest(dir: string): Manifest {
  const path = join(dir, MANIFEST);
  if (!existsSync(dir)) throw new CliError(EXIT.refused, `no backup at ${dir}: the folder does not exist`);
  if (!statSync(dir).isDirectory()) throw new CliError(EXIT.refused, `no backup at ${dir}: it is a file; a backup is the folder that holds ${MANIFEST}`);
  let m: Manifest;
  try {
    m = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new CliError(EXIT.refused, `${dir} has no ${MANIFEST}: it is not a backup, or a backup that never finished`);
    throw new CliError(EXIT.refused, code === undefined ? `${path} cannot be read: ${(e as Error).message}` : `cannot read the manifest: ${describeIoError(e, path)}`);
  }
  if (m?.format !== FORMAT || !Array.isArray(m.files)) throw new CliError(EXIT.refused, `${path} is not a scopebase backup manifest`);
  if (!READS.includes(m.formatVersion)) throw new CliError(EXIT.refused, `${path} has format version ${m.formatVersion}; this scopebase reads versions ${READS.join(' and ')}`);
  if (m.formatVersion >= 2) {
    const { manifestSha256: written, ...rest } = m;
    if (written !== digest(JSON.stringify(rest))) throw new CliError(EXIT.refused, `${path} was changed after the backup wrote it (its manifestSha256 does not match): a manifest is never edited; use a backup as it was made`);
  }
  const seen = new Set<string>();
  for (const f of m.files) {
    const wrong = entryProblem(f);
    if (wrong) throw new CliError(EXIT.refused, `${path} lists a malformed entry (${JSON.stringify(f?.path ?? f).slice(0, 80)}): ${wrong}`);
    if (seen.has(f.path)) throw new CliError(EXIT.refused, `${path} lists ${f.path} twice`);
    seen.add(f.path);
  }
  return m;
}

/** Why an entry is not one a backup writes: each database at its scope's path, each store and key by its name. */
function entryProblem(f: ManifestFile): string | null {
  if (!safeRelative(f?.path) || typeof f.size !== 'number' || typeof f.sha256 !== 'string') return 'no path, size or SHA-256';
  if (f.kind === 'database') {
    const s = f.scope;
    const parts = typeof s === 'object' && s !== null ? [s.org, s.repo, s.database] : [];
    const named = parts.length === 3 && parts.every((x) => typeof x === 'string' && x !== '' && !x.includes('/'));
    return named && f.path === `db/${parts.join('/')}.sqlite` ? null : 'a database is db/{org}/{repo}/{database}.sqlite, with that scope';
  }
  return STORES.some((x) => x.file === f.path && x.kind === f.kind) ? null : `not a store or key a backup holds as "${String(f.kind)}"`;
}

export interface Problem { path: string; problem: string }

/** Size and SHA-256 of one listed file; null when it matches. */
export function checkFile(dir: string, f: ManifestFile): string | null {
  const path = join(dir, f.path);
  let size: number;
  try {
    const notPlain = notAPlainFile(dir, f.path);
    if (notPlain) return notPlain;
    size = lstatSync(path).size;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : `cannot be read (${(e as NodeJS.ErrnoException).code})`;
  }
  if (size !== f.size) return `size ${size} bytes, the manifest says ${f.size}`;
  if (sha256File(path) !== f.sha256) return 'altered: its SHA-256 differs from the manifest';
  return null;
}

/**
 * Why a listed path is not a regular file inside the backup, or null. Every part of the path is looked at without
 * following it: a symlink (to a file or a folder) would bring in a file from anywhere on the machine, and a FIFO or a
 * device would hang the read (attack round 3).
 */
function notAPlainFile(dir: string, rel: string): string | null {
  const parts = rel.split('/');
  for (let i = 1; i <= parts.length; i++) {
    const st = lstatSync(join(dir, ...parts.slice(0, i)));
    if (st.isSymbolicLink()) return 'a symbolic link: a backup holds its files themselves';
    if (i < parts.length && !st.isDirectory()) return 'not inside a folder of the backup';
    if (i === parts.length && !st.isFile()) return 'not a regular file';
  }
  return null;
}

/** SQLite's own check of a copy: `ok`, or the first problems it names. */
export function integrity(path: string): string | null {
  let db: DatabaseSync | undefined;
  try {
    db = new DatabaseSync(path, { readOnly: true });
    const rows = db.prepare('PRAGMA integrity_check(5)').all() as { integrity_check: string }[];
    const text = rows.map((r) => r.integrity_check).join('; ');
    return text === 'ok' ? null : `integrity_check: ${text}`;
  } catch (e) {
    return `integrity_check: ${(e as Error).message}`;
  } finally {
    db?.close();
  }
}

/**
 * Every problem with a backup: listed files missing, resized or altered, files the manifest does not list (a
 * manifest with entries taken out would restore less than the backup holds, saying nothing), and (optionally)
 * SQLite copies damaged.
 */
export function checkBackup(dir: string, m: Manifest, opts: { integrity: boolean; onFile?: (done: number) => void }): Problem[] {
  const problems: Problem[] = [];
  m.files.forEach((f, i) => {
    const bad = checkFile(dir, f) ?? (opts.integrity && isSqlite(f) ? integrity(join(dir, f.path)) : null);
    if (bad) problems.push({ path: f.path, problem: bad });
    opts.onFile?.(i + 1);
  });
  return [...problems, ...unlisted(dir, m)];
}

/** Files (and links, FIFOs, …) in the backup folder that its manifest does not list; folders are walked, not followed. */
function unlisted(dir: string, m: Manifest): Problem[] {
  const listed = new Set(m.files.map((f) => f.path));
  const out: Problem[] = [];
  const walk = (rel: string) => {
    let entries;
    try {
      entries = readdirSync(rel === '' ? dir : join(dir, rel), { withFileTypes: true });
    } catch (e) {
      out.push({ path: rel || '.', problem: `a folder that cannot be read (${(e as NodeJS.ErrnoException).code})` });
      return;
    }
    for (const e of entries) {
      const path = rel === '' ? e.name : `${rel}/${e.name}`;
      if (e.isDirectory()) walk(path);
      else if (path !== MANIFEST && !listed.has(path)) out.push({ path, problem: 'not listed in the manifest' });
    }
  };
  walk('');
  return out;
}

export function bytes(n: number): string {
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} bytes` : `${n.toFixed(1)} ${units[i]}`;
}
