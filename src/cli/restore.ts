// `scopebase restore` (SPEC 9.2): checks every file of a backup against its manifest before writing anything, then
// fills DATA_DIR through a folder beside it, renamed into place; the restored databases tell mirrors that their
// versions restarted (docs/backups.md, "Mirrors after a restore").
import { chmodSync, copyFileSync, existsSync, mkdirSync, renameSync, rmSync, rmdirSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import type { Command } from 'commander';
import { commitBackupRestore, restoredMarkPath, writeRestoredMark } from '../db/backup-restored.ts';
import { rewindDelivery } from '../mirror/delivery/store.ts';
import { realPath } from '../shared/paths.ts';
import { DATA_PARTS, DataDirInUse, lockData, lockFolder, type DataLock } from '../shared/data-lock.ts';
import { CliError, EXIT, count, printJson } from './output.ts';
import { describeIoError, inside, isEmptyDir, makeDirs, makeParent, realDataDir, syncFile } from './files.ts';
import { bytes, checkBackup, readManifest, sha256File, type Manifest } from './backup-manifest.ts';
import { checkClusterNode } from './restore-cluster.ts';

export interface RestoreResult { dataDir: string; files: number; bytes: number; movedAside?: string }

export function runRestore(dir: string, opts: { force?: boolean; env?: Record<string, string | undefined> } = {}): RestoreResult {
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
      makeParent(dest);
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
    const mark = commitBackupRestore(path, f.scope, at);
    held.set(key(f.scope), mark.restoredVersion);
    syncFile(path);
    writeRestoredMark(path, mark); // a cluster primary does not send this copy over a follower holding what the backup lost
    syncFile(restoredMarkPath(path));
  }
  for (const f of manifest.files.filter((m) => m.kind === 'mirror')) {
    rewindDelivery(join(staging, f.path), (s) => held.get(key(s)));
    syncFile(join(staging, f.path));
  }
}

const RESTORE_HELP = `
Checks every file of the backup against its manifest first (a missing or altered file: nothing is written), then
fills DATA_DIR through a folder beside it that is renamed into place. Files get mode 0600, folders 0700. Refused
while a server runs on DATA_DIR: stop it first. --force replaces a non-empty DATA_DIR; its old contents are moved
to DATA_DIR.before-restore-*. Each database goes on one version past its backup's, a database.restored event every
mirror receives first: a mirror that holds versions lost with the disk takes a snapshot (docs/backups.md).
On a cluster node, run it with the node's environment (CLUSTER_ETCD, CLUSTER_NODE_ID): it is refused while etcd
shows the node alive (stop it and wait out its lease: its followers take its databases over), and it names the
databases that waited for the node, which come back at the backup's versions (docs/backups.md, "Backups of a cluster").

Example:
  DATA_DIR=/srv/scopebase/data scopebase restore /backups/2026-11-25`;

export function addRestoreCommand(program: Command): void {
  program.command('restore')
    .description('fill an empty DATA_DIR from a backup after checking every checksum in its manifest')
    .argument('<dir>', 'the backup folder (the one holding manifest.json)')
    .option('--force', 'replace a non-empty DATA_DIR (its old contents are moved aside)')
    .option('--json', 'print the result as JSON')
    .addHelpText('after', RESTORE_HELP)
    .action(async (dir: string, opts: { force?: boolean; json?: boolean }) => {
      const note = await checkClusterNode(process.env); // refused while etcd shows this node alive
      const r = runRestore(dir, { force: opts.force });
      if (note !== null) process.stderr.write(`scopebase: ${note}\n`);
      if (opts.json) return printJson({ dataDir: r.dataDir, files: r.files, bytes: r.bytes, movedAside: r.movedAside ?? null });
      const aside = r.movedAside ? `; the previous contents are in ${r.movedAside}` : '';
      process.stdout.write(`restored ${count(r.files, 'file')} (${bytes(r.bytes)}) into ${r.dataDir}${aside}\n`);
    });
}
