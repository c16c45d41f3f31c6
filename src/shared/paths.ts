// Paths that may not exist yet (DATA_DIR, a backup's folder): what part of them exists.
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';

/** The path itself if it exists, else its nearest ancestor that does (`/` at the last). */
export function nearestExisting(path: string): string {
  let d = resolve(path);
  while (!existsSync(d) && dirname(d) !== d) d = dirname(d);
  return d;
}
