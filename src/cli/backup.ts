// `scopebase backup|restore|verify` (SPEC 9.2): whole-instance backups of DATA_DIR, taken while the service serves.
// Each SQLite file is copied with SQLite's online backup in one step (a consistent snapshot, never a raw copy of a
// live file); the manifest is written last, so an interrupted backup never looks finished.
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, linkSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { backup as sqliteBackup, DatabaseSync } from 'node:sqlite';
import type { Command } from 'commander';
import { CliError, EXIT, printJson, usageError } from './output.ts';
import { instanceFiles, MANIFEST, problems, readManifest, scopeOf, sha256File, versionOf, type Manifest, type ManifestFile } from './backup-files.ts';

const dataDirOf = () => resolve(process.env.DATA_DIR || './data');
const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;

/** A line every second on a terminal ("copied 120/3400 files, 1.2 MiB"); nothing when output goes to a file. */
function progress(what: string, total: number): { tick: (done: number, bytes?: number) => void; end: () => void } {
  let last = 0;
  const tty = process.stderr.isTTY === true;
  return {
    tick(done, bytes) {
      if (!tty || Date.now() - last < 1000) return;
      last = Date.now();
      process.stderr.write(`\r${what} ${done}/${total} files${bytes === undefined ? '' : `, ${mib(bytes)}`}   `);
    },
    end() {
      if (tty && last > 0) process.stderr.write('\n');
    },
  };
}

function failed(e: unknown, doing: string): CliError {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC') return new CliError(EXIT.refused, `${doing}: the disk is full; nothing was finished (no ${MANIFEST} was written)`);
  if (code === 'EACCES' || code === 'EPERM' || code === 'EROFS') return new CliError(EXIT.refused, `${doing}: not allowed to write there (${code})`);
  return new CliError(EXIT.refused, `${doing}: ${(e as Error).message}`);
}

/** Copies one SQLite file consistently, as a rollback-journal file any sqlite3 opens without its -wal. */
async function copySqlite(from: string, to: string): Promise<void> {
  const source = new DatabaseSync(from, { readOnly: true });
  try {
    await sqliteBackup(source, to, { rate: 2_147_483_647 }); // one step: a snapshot, never restarted by a write
  } finally {
    source.close();
  }
  const copy = new DatabaseSync(to);
  try {
    copy.exec('PRAGMA journal_mode=DELETE');
  } finally {
    copy.close();
  }
}

async function runBackup(target: string, previous: string | undefined, json: boolean): Promise<void> {
  const dataDir = dataDirOf();
  if (!existsSync(dataDir)) throw new CliError(EXIT.config, `DATA_DIR ${dataDir} does not exist: nothing to back up`);
  if (existsSync(target) && readdirSync(target).length > 0) throw usageError(`${target} is not empty: back up into a new directory`);
  const prev = previous === undefined ? null : readManifest(previous);
  const before = new Map((prev?.files ?? []).map((f) => [f.path, f]));
  const files = instanceFiles(dataDir);
  const started = Date.now();
  const bar = progress('backed up', files.length);
  const out: ManifestFile[] = [];
  let copied = 0;
  let reused = 0;
  let bytes = 0;
  mkdirSync(target, { recursive: true, mode: 0o700 });
  try {
    for (const [i, f] of files.entries()) {
      bar.tick(i, bytes);
      const from = join(dataDir, f.path);
      const to = join(target, f.path);
      mkdirSync(dirname(to), { recursive: true, mode: 0o700 });
      let entry: ManifestFile | undefined;
      const old = before.get(f.path);
      if (f.kind === 'database' && old?.version !== undefined && old.version === versionOf(from)) {
        // Unchanged since the previous backup (same version): its file is reused, after its checksum is checked.
        const was = join(previous!, f.path);
        if (existsSync(was) && statSync(was).size === old.size && sha256File(was) === old.sha256) {
          try {
            linkSync(was, to);
          } catch {
            copyFileSync(was, to);
          }
          entry = old;
          reused++;
        }
      }
      if (!entry) {
        if (f.kind === 'key') copyFileSync(from, to);
        else await copySqlite(from, to);
        entry = { path: f.path, kind: f.kind, size: statSync(to).size, sha256: sha256File(to) };
        if (f.kind === 'database') Object.assign(entry, { scope: scopeOf(f.path), version: versionOf(to) });
        copied++;
      }
      bytes += entry.size;
      out.push(entry);
    }
    const manifest: Manifest = { format: 1, createdAt: new Date().toISOString(), files: out };
    const tmp = join(target, `.${MANIFEST}.${randomBytes(4).toString('hex')}`);
    writeFileSync(tmp, JSON.stringify(manifest, null, 1), { mode: 0o600 });
    renameSync(tmp, join(target, MANIFEST));
  } catch (e) {
    bar.end();
    throw failed(e, `backup into ${target} failed`);
  }
  bar.end();
  const databases = out.filter((f) => f.kind === 'database').length;
  const summary = { directory: target, files: out.length, databases, copied, reused, bytes, seconds: (Date.now() - started) / 1000 };
  if (json) return printJson(summary);
  process.stdout.write(`backed up ${dataDir} into ${target}: ${databases} databases and ${out.length - databases} other files, ${mib(bytes)}; `
    + `${copied} copied${prev ? `, ${reused} unchanged since ${previous} (reused)` : ''}, in ${summary.seconds.toFixed(1)} s\n`);
}

function runVerify(dir: string, json: boolean): void {
  const m = readManifestOrFail(dir);
  const bar = progress('verified', m.files.length);
  const found = problems(dir, m, true, (i) => bar.tick(i));
  bar.end();
  if (json) printJson({ directory: dir, files: m.files.length, problems: found });
  if (found.length) throw new CliError(EXIT.refused, `${dir} is not a sound backup: ${found.join('; ')}`);
  if (!json) process.stdout.write(`${dir}: OK — ${m.files.length} files match the manifest of ${m.createdAt}, every SQLite file passes its integrity check\n`);
}

function readManifestOrFail(dir: string): Manifest {
  try {
    return readManifest(dir);
  } catch (e) {
    throw new CliError(EXIT.refused, (e as Error).message);
  }
}

function runRestore(dir: string, force: boolean, json: boolean): void {
  const dataDir = dataDirOf();
  const m = readManifestOrFail(dir);
  const found = problems(dir, m, false);
  if (found.length) throw new CliError(EXIT.refused, `refusing to restore from ${dir}, nothing was written: ${found.join('; ')}`);
  const occupied = existsSync(dataDir) && readdirSync(dataDir).length > 0;
  if (occupied && !force) throw new CliError(EXIT.refused, `DATA_DIR ${dataDir} is not empty: restore into an empty one, or add --force to replace it (stop the instance first)`);
  // Built beside DATA_DIR and renamed into place: a failed restore leaves nothing half made.
  const staging = `${dataDir}.restoring-${randomBytes(4).toString('hex')}`;
  try {
    mkdirSync(staging, { recursive: true, mode: 0o700 });
    for (const f of m.files) {
      mkdirSync(dirname(join(staging, f.path)), { recursive: true, mode: 0o700 });
      copyFileSync(join(dir, f.path), join(staging, f.path));
    }
    if (existsSync(dataDir)) {
      const aside = `${dataDir}.replaced-${randomBytes(4).toString('hex')}`;
      renameSync(dataDir, aside);
      renameSync(staging, dataDir);
      rmSync(aside, { recursive: true, force: true });
    } else {
      renameSync(staging, dataDir);
    }
  } catch (e) {
    rmSync(staging, { recursive: true, force: true });
    throw failed(e, `restore into ${dataDir} failed`);
  }
  const databases = m.files.filter((f) => f.kind === 'database').length;
  if (json) return printJson({ directory: dir, dataDir, files: m.files.length, databases });
  process.stdout.write(`restored ${dir} (${m.createdAt}) into ${dataDir}: ${databases} databases and ${m.files.length - databases} other files, every checksum checked\n`);
}

export function addBackupCommands(program: Command): void {
  program.command('backup')
    .description('copy every database, the account and credential stores, the mirror delivery state and generated keys of DATA_DIR into a new directory, while the instance serves')
    .argument('<dir>', 'a new (or empty) directory')
    .option('--incremental <previous>', 'reuse the files of databases unchanged since this earlier backup (the result is complete on its own)')
    .option('--json', 'machine-readable output')
    .addHelpText('after', `
DATA_DIR (default ./data) says which instance. Time-travel history (DATA_DIR/history) is not included.

Examples:
  scopebase backup /backups/2026-11-24
  scopebase backup /backups/2026-11-25 --incremental /backups/2026-11-24`)
    .action(async (dir: string, opts: { incremental?: string; json?: boolean }) => runBackup(resolve(dir), opts.incremental && resolve(opts.incremental), opts.json === true));
  program.command('restore')
    .description('fill an empty DATA_DIR from a backup, after checking every file against its manifest')
    .argument('<dir>', 'the backup directory')
    .option('--force', 'replace a DATA_DIR that is not empty (stop the instance first)')
    .option('--json', 'machine-readable output')
    .addHelpText('after', `
Example:
  DATA_DIR=/srv/scopebase scopebase restore /backups/2026-11-24`)
    .action((dir: string, opts: { force?: boolean; json?: boolean }) => runRestore(resolve(dir), opts.force === true, opts.json === true));
  program.command('verify')
    .description("check a backup without restoring it: every file's size and SHA-256, and SQLite's integrity check")
    .argument('<dir>', 'the backup directory')
    .option('--json', 'machine-readable output')
    .addHelpText('after', `
Example:
  scopebase verify /backups/2026-11-24`)
    .action((dir: string, opts: { json?: boolean }) => runVerify(resolve(dir), opts.json === true));
}
