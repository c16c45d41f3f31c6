// A progress bar for long transfers (import, export), on standard error when it is a terminal; scripts and --json
// get none, only the line saying what was done.
import { SingleBar, Presets } from 'cli-progress';
import type { Progress } from '../client/index.ts';

const mib = (n: number) => (n / 1048576).toFixed(1);

export interface ByteProgress { update: Progress; stop(): void }

export function byteProgress(label: string, quiet: boolean, stream: NodeJS.WriteStream = process.stderr): ByteProgress {
  if (quiet || !stream.isTTY) return { update: () => undefined, stop: () => undefined };
  const bar = new SingleBar({ stream, format: `${label} [{bar}] {percentage}% {done}/{all} MiB`, hideCursor: true, clearOnComplete: true }, Presets.shades_classic);
  let started = false;
  return {
    update(done, total) {
      if (!started) {
        bar.start(total ?? done, 0, { done: '0.0', all: total === null ? '?' : mib(total) });
        started = true;
      }
      if (total === null) bar.setTotal(Math.max(done, 1));
      bar.update(done, { done: mib(done), all: total === null ? '?' : mib(total) });
    },
    stop: () => started && bar.stop(),
  };
}
