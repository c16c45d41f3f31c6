// `scopebase backup|restore|verify` (SPEC 9.2): whole-instance copies taken with SQLite's online backup while the
// service serves, a manifest with every file's SHA-256, and a restore that checks everything before writing anything.
import { chmodSync, copyFileSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, closeSync, readdirSync, renameSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { backup as sqliteBackup, DatabaseSync } from 'node:sqlite';
import type { Command } from 'commander';
import { Layout } from '../db/layout.ts';
import { commitBackupRestore } from '../db/backup-restored.ts';
import { rewindDelivery } from '../mirror/delivery/store.ts';
import { dataDirOf } from '../shared/config.ts';
import { realPath } from '../shared/paths.ts';
import { DATA_PARTS, DataDirInUse, lockData, lockFolder, type DataLock } from '../shared/data-lock.ts';
import { CliError, EXIT, printJson } from './output.ts';
import { describeIoError, isUnsoundSqlite } from './files.ts';
import {
  FORMAT, FORMAT_VERSION, MANIFEST, bytes, checkBackup, checkFile, readManifest, sha256File,
  type FileKind, type Manifest, type ManifestFile,
} from './backup-manifest.ts';

type Env = Record<string, string | undefined>;
type Out = NodeJS.WritableStream & { isTTY?: boolean };

/** The stores beside the databases, and the development keys generated into DATA_DIR (config.ts). */
const STORES: { file: string; kind: FileKind }[] = [
  { file: 'accounts.sqlite', kind: 'account' },
  { file: 'credentials.sqlite', kind: 'credentials' },
  { file: 'mirrors.sqlite', kind: 'mirror' },
  { file: 'runtime-root.key', kind: 'key' },
  { file: 'account-encryption.key', kind: 'key' },
];

/** One step copies the whole file, so the copy is one read transaction's snapshot (a multi-step copy restarts on every write). */
const WHOLE_FILE = 2 ** 31 - 1;

interface Source { abs: string; rel: string; kind: FileKind; scope?: ManifestFile['scope'] }

/** DATA_DIR as the server reads it (without generating keys into it as loadConfig would), symlinks resolved. */
function realDataDir(env: Env): string {
  return realPath(dataDirOf(env));
}

/** a is b or lies inside it; both real paths, so a symlink cannot hide DATA_DIR. */
const inside = (a: string, b: string) => a === b || a.startsWith(b + sep);

async function sources(dataDir: string): Promise<Source[]> {
  const out: Source[] = [];
  const dbRoot = join(dataDir, 'db');
  const scopes = [];
  for await (const s of new Layout(dbRoot).all()) scopes.push(s);
  scopes.sort((a, b) => `${a.org}/${a.repo}/${a.database}`.localeCompare(`${b.org}/${b.repo}/${b.database}`));
  for (const s of scopes) {
    const rel = `db/${s.org}/${s.repo}/${s.database}.sqlite`;
    out.push({ abs: join(dataDir, rel), rel, kind: 'database', scope: { org: s.org, repo: s.repo, database: s.database } });
  }
  for (const { file, kind } of STORES) if (existsSync(join(dataDir, file))) out.push({ abs: join(dataDir, file), rel: file, kind });
  return out;
}

/** "copied 120/3400 databases (1.2 GiB)" once a second on a terminal; nothing when stderr is not one. */
class Progress {
  private last = Date.now();
  private readonly out: Out;
  private readonly verb: string;
  constructor(out: Out, verb: string) {
    this.out = out;
    this.verb = verb;
  }
  tick(done: number, total: number, size: number): void {
    if (this.out.isTTY !== true || Date.now() - this.last < 1000) return;
    this.last = Date.now();
    this.out.write(`${this.verb} ${done}/${total} files (${bytes(size)})\n`);
  }
}

function isEmptyDir(path: string): boolean {
  return statSync(path).isDirectory() && readdirSync(path).length === 0;
}

function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function versionOf(db: DatabaseSync): number | undefined {
  try {
    const row = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number | bigint } | undefined;
    return row === undefined ? undefined : Number(row.value);
  } catch {
    return undefined; // a database never written to has no meta table yet
  }
}

function fileId(path: string): string {
  const st = statSync(path);
  return `${st.dev}:${st.ino}:${Math.round(st.birthtimeMs)}`;
}

/** The online copy: one read snapshot of the live file, then made a plain rollback-journal file so it reads without -wal/-shm. */
async function copySqlite(src: DatabaseSync, dest: string): Promise<number | undefined> {
  await sqliteBackup(src, dest, { rate: WHOLE_FILE });
  const copy = new DatabaseSync(dest);
  try {
    copy.exec('PRAGMA journal_mode=DELETE');
    return versionOf(copy);
  } finally {
    copy.close();
  }
}

/** mkdir -p by hand: Node's recursive mkdir never returns for some paths (e.g. under /proc). */
function makeDirs(path: string): void {
  const missing: string[] = [];
  for (let d = path; !existsSync(d) && dirname(d) !== d; d = dirname(d)) missing.push(d);
  for (const d of missing.reverse()) mkdirSync(d, { mode: 0o700 });
}

function place(path: string): void {
  makeDirs(dirname(path));
}

/** copied and reused count databases; the stores and keys are always copied. */
export interface BackupResult { dir: string; manifest: Manifest; copied: number; reused: number; bytes: number }

export async function runBackup(dir: string, opts: { incremental?: string; env?: Env; progress?: Out } = {}): Promise<BackupResult> {
  const dataDir = realDataDir(opts.env ?? process.env);
  if (!existsSync(dataDir)) throw new CliError(EXIT.config, `DATA_DIR ${dataDir} does not exist: set DATA_DIR to the folder the server uses`);
  const target = realPath(dir);
  if (inside(target, dataDir)) throw new CliError(EXIT.usage, `${target} is inside DATA_DIR (${dataDir}): write the backup somewhere else`);
  if (existsSync(target) && !isEmptyDir(target)) throw new CliError(EXIT.refused, `${target} already exists and is not an empty folder: give a new folder for each backup`);
  const previous = opts.incremental === undefined ? undefined : realPath(opts.incremental);
  if (previous !== undefined && inside(target, previous)) throw new CliError(EXIT.usage, `${target} is inside the previous backup ${previous}: write each backup into a folder of its own`);
  const prev = previous === undefined ? undefined : readManifest(previous);
  const prevByPath = new Map((prev?.files ?? []).map((f) => [f.path, f]));

  const list = await sources(dataDir);
  const progress = new Progress(opts.progress ?? process.stderr, 'copied');
  // Written under another name and renamed at the end: a half backup (disk full, killed) never looks complete.
  const partial = `${target}.partial-${randomBytes(4).toString('hex')}`;
  const files: ManifestFile[] = [];
  const skipped: { path: string; problem: string }[] = [];
  let copied = 0;
  let reused = 0;
  let total = 0;
  let current = target;
  // Ctrl-C or a stop: finish the file in flight (SQLite is writing it), then remove the half-written folder.
  let stopBy: NodeJS.Signals | undefined;
  const interrupted = (signal: NodeJS.Signals) => {
    if (stopBy) process.exit(EXIT.refused); // asked twice: go now (the folder has no manifest)
    stopBy = signal;
    process.stderr.write(`scopebase: ${signal}: stopping after the current file\n`);
  };
  process.on('SIGINT', interrupted).on('SIGTERM', interrupted);
  try {
    makeDirs(dirname(partial));
    mkdirSync(partial, { mode: 0o700 });
    for (const s of list) {
      if (stopBy) throw new CliError(EXIT.refused, `backup interrupted by ${stopBy}, nothing was kept`);
      current = `copying ${s.abs} to ${join(target, s.rel)}`;
      const dest = join(partial, s.rel);
      place(dest);
      let entry: ManifestFile;
      if (s.kind === 'key') {
        copyFileSync(s.abs, dest);
        chmodSync(dest, 0o600);
        syncFile(dest);
        entry = { path: s.rel, kind: s.kind, size: statSync(dest).size, sha256: sha256File(dest) };
      } else {
        let src: DatabaseSync;
        try {
          src = new DatabaseSync(s.abs, { readOnly: true });
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'ERR_SQLITE_ERROR' && !existsSync(s.abs)) continue; // deleted since listed
          throw e;
        }
        try {
          if (s.kind === 'database') src.prepare('SELECT count(*) FROM sqlite_schema').get(); // a damaged schema fails here
        } catch (e) {
          src.close();
          // One repo's damaged database must not stop every org's backup: it is left out, named, and the exit says so.
          if (!isUnsoundSqlite(e)) throw e;
          skipped.push({ path: s.rel, problem: String((e as Error).message).slice(0, 200) });
          (opts.progress ?? process.stderr).write(`${s.rel} is damaged (${String((e as Error).message).slice(0, 120)}): left out of this backup\n`);
          continue;
        }
        try {
          const source = s.kind === 'database' ? fileId(s.abs) : undefined;
          const before = prevByPath.get(s.rel);
          const live = s.kind === 'database' ? versionOf(src) : undefined;
          const unchanged = previous !== undefined && before !== undefined && live !== undefined && before.version === live && before.source === source;
          const bad = unchanged ? checkFile(previous, before) : null;
          if (bad) (opts.progress ?? process.stderr).write(`${before!.path} in the previous backup is ${bad}: copied afresh\n`);
          if (unchanged && bad === null) {
            // Unchanged since the previous backup (same file, same version): linked, so each backup is complete on its own.
            try {
              linkSync(join(previous!, before!.path), dest);
            } catch {
              copyFileSync(join(previous!, before!.path), dest);
            }
            entry = { ...before! };
            reused++;
          } else {
            const version = await copySqlite(src, dest);
            chmodSync(dest, 0o600);
            entry = { path: s.rel, kind: s.kind, ...(s.scope ? { scope: s.scope } : {}), ...(version !== undefined ? { version } : {}), ...(source ? { source } : {}), size: statSync(dest).size, sha256: sha256File(dest) };
            if (s.kind === 'database') copied++;
          }
        } finally {
          src.close();
        }
      }
      files.push(entry);
      total += entry.size;
      progress.tick(files.length, list.length, total);
    }
    current = join(target, MANIFEST);
    const manifest: Manifest = { format: FORMAT, formatVersion: FORMAT_VERSION, createdAt: new Date().toISOString(), ...(previous ? { incrementalFrom: previous } : {}), files, ...(skipped.length ? { skipped } : {}) };
    const mpath = join(partial, MANIFEST);
    writeFileSync(mpath, JSON.stringify(manifest, null, 2) + '\n', { mode: 0o600 });
    syncFile(mpath);
    current = target;
    if (existsSync(target)) rmdirSync(target); // an empty folder made for the backup
    renameSync(partial, target);
    return { dir: target, manifest, copied, reused, bytes: total };
  } catch (e) {
    rmSync(partial, { recursive: true, force: true });
    if (e instanceof CliError) throw e;
    throw new CliError(EXIT.refused, `backup failed, nothing was kept: ${describeIoError(e, current)}`);
  } finally {
    process.off('SIGINT', interrupted).off('SIGTERM', interrupted);
  }
}

export interface RestoreResult { dataDir: string; files: number; bytes: number; movedAside?: string }

export function runRestore(dir: string, opts: { force?: boolean; env?: Env } = {}): RestoreResult {
  const dataDir = realDataDir(opts.env ?? process.env); // a DATA_DIR that can be no folder is named before any work
  const from = realPath(dir);
  const manifest = readManifest(from);
  const problems = checkBackup(from, manifest, { integrity: false });
  if (problems.length > 0) {
    const named = problems.slice(0, 3).map((p) => `${p.path} is ${p.problem}`).join('; ');
    const more = problems.length > 3 ? ` (and ${problems.length - 3} more: run scopebase verify ${dir})` : '';
    throw new CliError(EXIT.refused, `refusing to restore, nothing was written: ${named}${more}`);
  }
  if (inside(from, dataDir) || inside(dataDir, from)) throw new CliError(EXIT.usage, `the backup ${from} and DATA_DIR ${dataDir} overlap: restore from a backup kept outside DATA_DIR`);
  const exists = existsSync(dataDir);
  // Held until the restored folder is in place: a server must not start on DATA_DIR while it is being replaced.
  const lock = exists ? lockAgainstServers(dataDir) : null;
  try {
    return fill(dataDir, from, manifest, exists, opts.force === true);
  } finally {
    lock?.release();
  }
}

/** The locks of every part whose lock file DATA_DIR holds; a server holding one is still running there. */
function lockAgainstServers(dataDir: string): DataLock {
  try {
    // Named in the owner files, so a server started meanwhile says what holds DATA_DIR.
    return lockData(dataDir, DATA_PARTS, { existingOnly: true, holder: 'scopebase restore' });
  } catch (e) {
    if (e instanceof DataDirInUse) throw new CliError(EXIT.refused, `DATA_DIR ${e.message}: stop it first, then restore; nothing was written`);
    throw new CliError(EXIT.refused, `restore failed, DATA_DIR was not changed: cannot take its lock: ${describeIoError(e, lockFolder(dataDir))}`);
  }
}

function fill(dataDir: string, from: string, manifest: Manifest, exists: boolean, force: boolean): RestoreResult {
  if (exists && !isEmptyDir(dataDir) && !force) {
    throw new CliError(EXIT.refused, `DATA_DIR ${dataDir} is not empty: restore fills an empty one; stop the service and pass --force to replace it (the old contents are moved aside, not deleted)`);
  }
  // Filled beside DATA_DIR and renamed into place: a failed restore leaves nothing half-made.
  const staging = `${dataDir}.restore-${randomBytes(4).toString('hex')}`;
  let current = staging;
  let size = 0;
  try {
    makeDirs(dirname(staging));
    mkdirSync(staging, { mode: 0o700 });
    for (const f of manifest.files) {
      const dest = join(staging, f.path);
      current = `copying ${join(from, f.path)} to ${dest}`;
      place(dest);
      copyFileSync(join(from, f.path), dest);
      chmodSync(dest, 0o600);
      syncFile(dest);
      if (sha256File(dest) !== f.sha256) throw new CliError(EXIT.refused, `${f.path} changed in the backup while it was being restored; nothing was written`);
      size += f.size;
    }
    current = `recording the restore in the databases restored into ${staging}`;
    restartMirrors(staging, manifest);
    let movedAside: string | undefined;
    current = dataDir;
    if (exists && isEmptyDir(dataDir)) rmdirSync(dataDir);
    else if (exists) {
      movedAside = `${dataDir}.before-restore-${new Date().toISOString().replace(/[:.]/g, '-')}`;
      renameSync(dataDir, movedAside);
    }
    try {
      renameSync(staging, dataDir);
    } catch (e) {
      if (movedAside) renameSync(movedAside, dataDir); // put the old contents back: DATA_DIR as it was
      throw e;
    }
    chmodSync(dataDir, 0o700);
    return { dataDir, files: manifest.files.length, bytes: size, ...(movedAside ? { movedAside } : {}) };
  } catch (e) {
    rmSync(staging, { recursive: true, force: true });
    if (e instanceof CliError) throw e;
    throw new CliError(EXIT.refused, `restore failed, DATA_DIR was not changed: ${describeIoError(e, current)}`);
  }
}

/**
 * Each restored database goes on one version past its backup's, as a `database.restored` event, and no mirror counts
 * as having acknowledged past the backup's version: every mirror receives that event first and, holding the versions
 * lost with the disk, takes a snapshot instead of keeping them (docs/backups.md, "Mirrors after a restore").
 */
function restartMirrors(staging: string, manifest: Manifest): void {
  const held = new Map<string, number>();
  const key = (s: { org: string; repo: string; database: string }) => `${s.org}/${s.repo}/${s.database}`;
  const at = Date.now();
  for (const f of manifest.files) {
    if (f.kind !== 'database' || f.scope === undefined) continue;
    const path = join(staging, f.path);
    held.set(key(f.scope), commitBackupRestore(path, f.scope, at).restoredVersion);
    syncFile(path);
  }
  for (const f of manifest.files.filter((m) => m.kind === 'mirror')) {
    rewindDelivery(join(staging, f.path), (s) => held.get(key(s)));
    syncFile(join(staging, f.path));
  }
}

const BACKUP_HELP = `
Copies every database (DATA_DIR/db), the account, credential and mirror-delivery stores and the development key
files with SQLite's online backup while the service keeps serving; each copy is one consistent snapshot. The
backup is written as <dir>.partial-* and renamed to <dir> at the end with manifest.json (per file: kind, scope,
version, size, SHA-256), so a half-written backup never looks complete. DATA_DIR/history (time travel), tmp and
the reference mirror's replicas are not included.
A repo's database SQLite cannot read is left out and named (manifest "skipped"); the backup is kept, exit 1.
--incremental copies only databases whose version changed since the previous backup; unchanged ones are
hard-linked from it after their checksum is checked, so every backup folder is complete on its own.

Examples:
  scopebase backup /backups/2026-11-25
  scopebase backup /backups/2026-11-26 --incremental /backups/2026-11-25`;

const RESTORE_HELP = `
Checks every file of the backup against its manifest first (a missing or altered file: nothing is written), then
fills DATA_DIR through a folder beside it that is renamed into place. Files get mode 0600, folders 0700. Refused
while a server runs on DATA_DIR: stop it first. --force replaces a non-empty DATA_DIR; its old contents are moved
to DATA_DIR.before-restore-*. Each database goes on one version past its backup's, a database.restored event every
mirror receives first: a mirror that holds versions lost with the disk takes a snapshot (docs/backups.md).

Example:
  DATA_DIR=/srv/scopebase/data scopebase restore /backups/2026-11-25`;

const VERIFY_HELP = `
Checks that every file the manifest lists is there with its size and SHA-256, and runs PRAGMA integrity_check on
every SQLite copy. Prints OK, or each bad file with what is wrong (exit 1).`;

export function addBackupCommands(program: Command): void {
  program.command('backup')
    .description('copy every database, the account, credential and delivery stores and the development keys into <dir>, online, with a checksummed manifest')
    .argument('<dir>', 'a new (or empty) folder for this backup')
    .option('--incremental <previous-dir>', 'reuse the unchanged databases of a previous backup instead of copying them again')
    .option('--json', 'print the manifest summary as JSON')
    .addHelpText('after', BACKUP_HELP)
    .action(async (dir: string, opts: { incremental?: string; json?: boolean }) => {
      const r = await runBackup(dir, { incremental: opts.incremental });
      const dbs = r.manifest.files.filter((f) => f.kind === 'database').length;
      if (opts.json) {
        printJson({ dir: r.dir, createdAt: r.manifest.createdAt, files: r.manifest.files.length, databases: dbs, copied: r.copied, reused: r.reused, bytes: r.bytes, incrementalFrom: r.manifest.incrementalFrom ?? null, manifest: r.manifest.files });
        return;
      }
      const others = r.manifest.files.length - dbs;
      const how = opts.incremental ? `copied ${r.copied}, reused ${r.reused} unchanged from ${r.manifest.incrementalFrom}` : `copied ${r.copied}`;
      process.stderr.write(`backup complete: ${dbs} databases (${how}), ${others} stores and keys, ${bytes(r.bytes)}\n`);
      process.stdout.write(`${r.dir}\n`);
      const left = r.manifest.skipped ?? [];
      if (left.length) throw new CliError(EXIT.refused, `the backup in ${r.dir} is kept without ${left.length} damaged database(s) SQLite could not read: ${left.map((x) => x.path).join(', ')} (docs/backups.md, "A damaged database")`);
    });
  program.command('restore')
    .description('fill an empty DATA_DIR from a backup after checking every checksum in its manifest')
    .argument('<dir>', 'the backup folder (the one holding manifest.json)')
    .option('--force', 'replace a non-empty DATA_DIR (its old contents are moved aside)')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', RESTORE_HELP)
    .action((dir: string, opts: { force?: boolean; json?: boolean }) => {
      const r = runRestore(dir, { force: opts.force });
      if (opts.json) return printJson({ dataDir: r.dataDir, files: r.files, bytes: r.bytes, movedAside: r.movedAside ?? null });
      const aside = r.movedAside ? `; the previous contents are in ${r.movedAside}` : '';
      process.stdout.write(`restored ${r.files} files (${bytes(r.bytes)}) into ${r.dataDir}${aside}\n`);
    });
  program.command('verify')
    .description('check a backup against its manifest (every file, size and SHA-256) and run integrity_check on each SQLite copy')
    .argument('<dir>', 'the backup folder')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', VERIFY_HELP)
    .action((dir: string, opts: { json?: boolean }) => {
      const from = resolve(dir);
      const m = readManifest(from);
      const progress = new Progress(process.stderr, 'checked');
      const problems = checkBackup(from, m, { integrity: true, onFile: (n) => progress.tick(n, m.files.length, 0) });
      if (opts.json) printJson({ ok: problems.length === 0, files: m.files.length, createdAt: m.createdAt, problems });
      else if (problems.length === 0) process.stdout.write(`OK: ${m.files.length} files match the manifest of ${m.createdAt} and pass integrity_check\n`);
      else for (const p of problems) process.stdout.write(`BAD ${p.path}: ${p.problem}\n`);
      if (problems.length > 0) throw new CliError(EXIT.refused, `backup ${relative(process.cwd(), from) || '.'} has ${problems.length} bad file(s): ${problems.map((p) => p.path).join(', ')}`, { jsonPrinted: opts.json === true });
    });
}
