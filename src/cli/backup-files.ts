// What a whole-instance backup holds (SPEC 9.2) and how it is checked: the files of DATA_DIR worth keeping, the
// manifest that lists them (path, kind, scope, version, size, SHA-256), and the checks verify and restore share.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { DatabaseSync } from 'node:sqlite';

export type Kind = 'database' | 'store' | 'key';

export interface ManifestFile {
  /** Relative to DATA_DIR (and to the backup directory), with forward slashes. */
  path: string;
  kind: Kind;
  scope?: { org: string; repo: string; database: string };
  /** A database's version (SPEC 4.5) in the copy. */
  version?: number;
  size: number;
  sha256: string;
}

export interface Manifest { format: 1; createdAt: string; files: ManifestFile[] }

export const MANIFEST = 'manifest.json';

/**
 * The files of an instance worth backing up: every database (db/{org}/{repo}/{name}.sqlite), the stores at the top
 * (accounts, credentials, mirror delivery: *.sqlite) and generated key files (*.key). Not history/ (time travel is
 * for recent mistakes; a backup is for a lost disk) and not tmp/.
 */
export function instanceFiles(dataDir: string): { path: string; kind: Kind }[] {
  const out: { path: string; kind: Kind }[] = [];
  const top = existsSync(dataDir) ? readdirSync(dataDir, { withFileTypes: true }) : [];
  for (const e of top) {
    if (e.isFile() && e.name.endsWith('.sqlite')) out.push({ path: e.name, kind: 'store' });
    if (e.isFile() && e.name.endsWith('.key')) out.push({ path: e.name, kind: 'key' });
  }
  const dbRoot = join(dataDir, 'db');
  for (const org of existsSync(dbRoot) ? readdirSync(dbRoot) : []) {
    for (const repo of readdirSync(join(dbRoot, org))) {
      for (const file of readdirSync(join(dbRoot, org, repo))) {
        if (file.endsWith('.sqlite')) out.push({ path: relative(dataDir, join(dbRoot, org, repo, file)).split(sep).join('/'), kind: 'database' });
      }
    }
  }
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

export function scopeOf(path: string): ManifestFile['scope'] {
  const [, org, repo, file] = path.split('/');
  return { org: org!, repo: repo!, database: file!.replace(/\.sqlite$/, '') };
}

export function sha256File(path: string): string {
  return createHash('sha256').update(readFileSync(path)).digest('hex');
}

/** The version a database copy holds (0 for a store without one). */
export function versionOf(path: string): number {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    const row = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number } | undefined;
    return Number(row?.value ?? 0);
  } finally {
    db.close();
  }
}

export function readManifest(dir: string): Manifest {
  const path = join(dir, MANIFEST);
  if (!existsSync(path)) throw new Error(`${dir} has no ${MANIFEST}: it is not a finished backup (an interrupted one is never finished)`);
  const m = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
  if (m.format !== 1 || !Array.isArray(m.files)) throw new Error(`${path} is not a scopebase backup manifest`);
  for (const f of m.files) {
    if (typeof f.path !== 'string' || f.path.startsWith('/') || f.path.split('/').includes('..')) throw new Error(`${path} names an unsafe path: ${JSON.stringify(f.path)}`);
  }
  return m;
}

/** Every problem with a backup's files: missing, wrong size, wrong checksum, and (with `deep`) not sound SQLite. */
export function problems(dir: string, m: Manifest, deep: boolean, progress: (done: number) => void = () => {}): string[] {
  const out: string[] = [];
  m.files.forEach((f, i) => {
    progress(i);
    const path = join(dir, f.path);
    if (!existsSync(path)) return void out.push(`${f.path}: missing`);
    const size = statSync(path).size;
    if (size !== f.size) return void out.push(`${f.path}: ${size} bytes, the manifest says ${f.size}`);
    if (sha256File(path) !== f.sha256) return void out.push(`${f.path}: its SHA-256 differs from the manifest's (the file was altered)`);
    if (deep && f.kind !== 'key') {
      const db = new DatabaseSync(path, { readOnly: true });
      try {
        const check = db.prepare('PRAGMA integrity_check(5)').all() as { integrity_check: string }[];
        if (check.length !== 1 || check[0]!.integrity_check !== 'ok') out.push(`${f.path}: integrity check: ${check.map((c) => c.integrity_check).join('; ')}`);
      } finally {
        db.close();
      }
    }
  });
  return out;
}
