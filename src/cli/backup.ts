// `scopebase backup|verify` (SPEC 9.2): whole-instance copies taken with SQLite's online backup while the service
// serves, with a manifest of every file's SHA-256; `restore` (restore.ts) checks everything before writing anything.
import { chmodSync, copyFileSync, existsSync, linkSync, mkdirSync, renameSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname, join, relative, resolve } from 'node:path';
import { backup as sqliteBackup, DatabaseSync } from 'node:sqlite';
import type { Command } from 'commander';
import { Layout } from '../db/layout.ts';
import { realPath } from '../shared/paths.ts';
import { CliError, EXIT, count, printJson } from './output.ts';
import { describeIoError, inside, isEmptyDir, isUnsoundSqlite, makeDirs, makeParent, realDataDir, syncFile } from './files.ts';
import {
  FORMAT, FORMAT_VERSION, MANIFEST, STORES, bytes, checkBackup, checkFile, manifestText, readManifest, sha256File,
  type FileKind, type Manifest, type ManifestFile,
} from './backup-manifest.ts';
import { addRestoreCommand } from './restore.ts';

type Env = Record<string, string | undefined>;
type Out = NodeJS.WritableStream & { isTTY?: boolean };

/** One step copies the whole file, so the copy is one read transaction's snapshot (a multi-step copy restarts on every write). */
const WHOLE_FILE = 2 ** 31 - 1;

interface Source { abs: string; rel: string; kind: FileKind; scope?: ManifestFile['scope'] }

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
      makeParent(dest);
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
    writeFileSync(mpath, manifestText(manifest), { mode: 0o600 });
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

const VERIFY_HELP = `
Checks the manifest's own checksum, that every file it lists is there with its size and SHA-256 and that the backup
holds no file it does not list, and runs PRAGMA integrity_check on every SQLite copy. Prints OK, or each bad file
with what is wrong (exit 1).`;

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
      process.stderr.write(`backup complete: ${count(dbs, 'database')} (${how}), ${count(others, 'store or key', 'stores and keys')}, ${bytes(r.bytes)}\n`);
      process.stdout.write(`${r.dir}\n`);
      const left = r.manifest.skipped ?? [];
      if (left.length) throw new CliError(EXIT.refused, `the backup in ${r.dir} is kept without ${left.length} damaged database(s) SQLite could not read: ${left.map((x) => x.path).join(', ')} (docs/backups.md, "A damaged database")`);
    });
  addRestoreCommand(program);
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
      const skipped = (m.skipped ?? []).map((x) => x.path);
      if (opts.json) printJson({ ok: problems.length === 0, files: m.files.length, createdAt: m.createdAt, problems, skipped });
      else if (problems.length > 0) for (const p of problems) process.stdout.write(`BAD ${p.path}: ${p.problem}\n`);
      else {
        const one = m.files.length === 1;
        // A backup that left a damaged database out holds all it lists, and is still not the whole instance: say so.
        const without = skipped.length ? `; left out when it was taken (damaged): ${skipped.join(', ')}` : '';
        process.stdout.write(`OK: ${count(m.files.length, 'file')} ${one ? 'matches' : 'match'} the manifest of ${m.createdAt} and ${one ? 'passes' : 'pass'} integrity_check; the backup holds no file it does not list${without}\n`);
      }
      if (problems.length > 0) throw new CliError(EXIT.refused, `backup ${relative(process.cwd(), from) || '.'} has ${count(problems.length, 'bad file')}: ${problems.map((p) => p.path).join(', ')}`, { jsonPrinted: opts.json === true });
    });
}
