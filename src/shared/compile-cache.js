// Where Node's compile cache may live. Plain JavaScript, so the entry point can use it before Node's TypeScript
// stripper would load (a warm cache lets Node run our TypeScript without loading the stripper at all).
import { lstatSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * `$TMPDIR/scopebase-compile-cache-<uid>`, created 0700, or null when Node is already told where its cache is
 * (`NODE_COMPILE_CACHE` wins) or the directory is not ours alone: the cache holds code that runs.
 * @returns {string | null}
 */
export function compileCacheDir() {
  if (process.env.NODE_COMPILE_CACHE || typeof process.getuid !== 'function') return null;
  const uid = process.getuid();
  const dir = join(tmpdir(), `scopebase-compile-cache-${uid}`);
  try {
    mkdirSync(dir, { mode: 0o700, recursive: true });
    const st = lstatSync(dir);
    return st.isDirectory() && st.uid === uid && (st.mode & 0o077) === 0 ? dir : null;
  } catch {
    return null; // no cache: a process only starts a little slower and larger
  }
}
