// A real small filesystem for full-disk faults: a tmpfs mounted on a fresh directory (root only) and a ballast file
// that takes every byte left on it, deleted later as an operator frees space.
import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const canMount = () => process.getuid?.() === 0;

/** Mounts a tmpfs of `sizeMiB` on a new directory; `unmount` (lazy: a killed process may still hold files) removes it. */
export function mountTmpfs(prefix: string, sizeMiB: number): { dir: string; unmount(): void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMiB}m`, 'tmpfs', dir]);
  return {
    dir,
    unmount() {
      try { execFileSync('umount', ['-l', dir], { stdio: 'ignore' }); } catch { /* already unmounted */ }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Writes `file` until the filesystem refuses even 4 KiB more; returns the bytes it took. */
export function fillDisk(file: string): number {
  const fd = openSync(file, 'w');
  let bytes = 0;
  try {
    for (const chunk of [Buffer.alloc(1 << 20, 1), Buffer.alloc(4096, 1)]) {
      for (;;) {
        try { bytes += writeSync(fd, chunk); } catch { break; } // ENOSPC: this chunk size no longer fits
      }
    }
  } finally {
    closeSync(fd);
  }
  return bytes;
}
