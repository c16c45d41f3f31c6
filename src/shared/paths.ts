// Paths that may not exist yet (DATA_DIR, a backup's folder): what part of them exists, and where they really are.
import { existsSync, realpathSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

/** The path itself if it exists, else its nearest ancestor that does (`/` at the last). */
export function nearestExisting(path: string): string {
  let d = resolve(path);
  while (!existsSync(d) && dirname(d) !== d) d = dirname(d);
  return d;
}

/** The path with every symlink of its existing part resolved: two names of one folder compare equal. */
export function realPath(path: string): string {
  const full = resolve(path);
  const existing = nearestExisting(full);
  return join(realpathSync(existing), relative(existing, full));
}
