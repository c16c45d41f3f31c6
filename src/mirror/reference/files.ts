// Where replicas live: DATA_DIR/mirror/<org>/<repo>/<db>.g<N>.sqlite. A bootstrap writes generation N+1 beside N,
// so a file is never replaced under a reader (nor paired with another file's WAL).
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Scope } from '../../db/contract.ts';

export function replicaDir(root: string, scope: Scope): string {
  return join(root, scope.org, scope.repo);
}

export function replicaPath(root: string, scope: Scope, generation: number): string {
  return join(replicaDir(root, scope), `${scope.database}.g${generation}.sqlite`);
}

/**
 * The newest complete generation on disk, or null; with `clean`, leftovers of older generations and unfinished
 * downloads are removed (only where no bootstrap of the scope runs: one is downloading beside it).
 */
export function currentGeneration(root: string, scope: Scope, clean = true): number | null {
  const dir = replicaDir(root, scope);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return null;
  }
  const pattern = new RegExp(`^${scope.database}\\.g(\\d+)\\.sqlite$`);
  const generations = names.map((n) => pattern.exec(n)).filter((m) => m !== null).map((m) => Number(m[1]));
  if (generations.length === 0) return null;
  const newest = Math.max(...generations);
  if (!clean) return newest;
  for (const g of generations) if (g !== newest) removeReplicaFiles(replicaPath(root, scope, g));
  for (const n of names) if (n.startsWith(`${scope.database}.g`) && n.endsWith('.download')) rmSync(join(dir, n), { force: true });
  return newest;
}

export function removeReplicaFiles(path: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(path + suffix, { force: true });
}

export function ensureDir(root: string, scope: Scope): void {
  mkdirSync(replicaDir(root, scope), { recursive: true });
}
