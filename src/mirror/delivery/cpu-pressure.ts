// Whether delivery should yield the CPU to serving, from /proc (Linux). Delivery is background work: on a small host
// under a write flood there is no spare core, and each delivered event costs the write path CPU time (the write path
// is latency-bound: it slows with any contention), while writes never wait for delivery anyway. Delivery then
// trickles until the flood is over, and catches up at full speed.
import { readFileSync, readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/** Yield when everything but delivery uses more than this share of the machine (all cores)… */
const YIELD_ABOVE = 0.6;
/** …and serving is busy: the main thread uses more than this share of a core (not the case for another process's load). */
const SERVING_BUSY = 0.3;
/** Full speed again when the others' share falls below this, or serving's below SERVING_IDLE (the gaps stop flapping). */
const RESUME_BELOW = 0.45;
const SERVING_IDLE = 0.2;
/** How often the machine is sampled. */
export const SAMPLE_EVERY_MS = 100;
/** The delivery thread's nice value: in a moment's contention for a core, serving goes first. */
const NICE = 10;

/** Lowers the calling thread's priority: Linux keeps a nice value per thread (setpriority(2)); elsewhere nothing. */
export function lowerThreadPriority(): void {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isSafeInteger(tid) && tid !== process.pid) setPriority(tid, Math.max(getPriority(tid), NICE));
  } catch {
    // no /proc/thread-self: not Linux
  }
}

/** CPU time in clock ticks: the machine's (all cores) busy and in total, this thread's, and the main thread's. */
export interface CpuSample {
  busy: number;
  total: number;
  cores: number;
  own: number;
  serving: number;
}

/** utime + stime of one thread, from its /proc stat line (the fields after the command's closing parenthesis). */
function threadTicks(path: string): number {
  const stat = readFileSync(path, 'latin1');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** Null where /proc is not there (not Linux): delivery then never yields. Call it on the delivery thread. */
export function readCpuSample(): CpuSample | null {
  try {
    const lines = readFileSync('/proc/stat', 'latin1').split('\n');
    // cpu  user nice system idle iowait irq softirq steal …: idle and iowait are time nobody wanted the CPU
    const cpu = lines[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = cpu.reduce((a, b) => a + b, 0);
    const cores = lines.filter((l) => /^cpu\d/.test(l)).length;
    return {
      busy: total - cpu[3]! - cpu[4]!, total, cores,
      own: threadTicks('/proc/thread-self/stat'),
      serving: threadTicks(`/proc/self/task/${process.pid}/stat`), // the main thread's id is the process's
    };
  } catch {
    return null;
  }
}

export class CpuPressure {
  private last: CpuSample | null;
  private yielding = false;
  private readonly read: () => CpuSample | null;

  constructor(read: () => CpuSample | null = readCpuSample) {
    this.read = read;
    this.last = read();
  }

  /** Takes a sample (every SAMPLE_EVERY_MS); returns whether delivery should yield until the next one. */
  sample(): boolean {
    const now = this.read();
    const last = this.last;
    this.last = now;
    if (!now || !last || now.total <= last.total || now.cores < 1) return this.yielding;
    const elapsed = now.total - last.total;
    const others = (now.busy - last.busy - (now.own - last.own)) / elapsed;
    const serving = ((now.serving - last.serving) * now.cores) / elapsed;
    if (this.yielding) {
      if (others < RESUME_BELOW || serving < SERVING_IDLE) this.yielding = false;
    } else if (others > YIELD_ABOVE && serving > SERVING_BUSY) this.yielding = true;
    return this.yielding;
  }

  get shouldYield(): boolean {
    return this.yielding;
  }
}
