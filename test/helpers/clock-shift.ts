// A wall-clock jump for one process tree, without root and without touching the system clock: loaded with
// `NODE_OPTIONS=--import=<this file>` (inherited by every process and worker thread the product starts), it replaces
// `Date` so that `Date.now()` and `new Date()` read the real time plus an offset in milliseconds that it reads from
// the file named by CLOCK_SHIFT_FILE every 50 ms (a missing or empty file: 0). Used by bench/faults.ts and test/clock-jump.test.ts.
// What it moves: every wall-clock read of JavaScript code (timestamps, committedAt, webhook-timestamp, session and
// rate-limit arithmetic, log times). What it does not: performance.now(), process.hrtime() and timers (monotonic, as
// a real jump leaves them), SQLite's own clock (CURRENT_TIMESTAMP, datetime('now') in user SQL), file times, and
// other processes (the load generator, a mirror outside the tree).
import { readFileSync } from 'node:fs';
import { syncBuiltinESMExports } from 'node:module';
import workerThreads from 'node:worker_threads';

const file = process.env.CLOCK_SHIFT_FILE;
if (file) {
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  let offset = 0;
  const read = () => {
    try {
      offset = Number(readFileSync(file, 'utf8').trim()) || 0;
    } catch {
      offset = 0;
    }
  };
  read();
  setInterval(read, 50).unref();
  function ShiftedDate(this: unknown, ...args: unknown[]): unknown {
    if (!new.target) return new RealDate(realNow() + offset).toString(); // Date() called as a function
    return Reflect.construct(RealDate, args.length ? args : [realNow() + offset], new.target);
  }
  ShiftedDate.prototype = RealDate.prototype;
  Object.setPrototypeOf(ShiftedDate, RealDate); // Date.parse, Date.UTC
  ShiftedDate.now = () => realNow() + offset;
  globalThis.Date = ShiftedDate as unknown as DateConstructor;
  // NODE_OPTIONS' --import does not run in worker threads (the product's mirror delivery is one): pass it on.
  const self = `--import=${import.meta.url}`;
  const RealWorker = workerThreads.Worker;
  workerThreads.Worker = class extends RealWorker {
    constructor(script: string | URL, options: workerThreads.WorkerOptions = {}) {
      super(script, { ...options, execArgv: [...(options.execArgv ?? process.execArgv), self] });
    }
  };
  syncBuiltinESMExports(); // `import { Worker } from 'node:worker_threads'` now gets this one
}
