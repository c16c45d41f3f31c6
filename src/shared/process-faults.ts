// What a server process does with a fault no request owns (a timer's throw, an event handler's, a promise nobody
// awaited): one process serves every org, so the policy is chosen here once (docs/reliability.md, "Faults outside a
// request"). A stray rejection is logged and counted, and the process keeps serving: the work it belonged to is lost,
// the rest is sound. An uncaught exception leaves state half-changed somewhere unknown: logged, then the process exits
// UNCAUGHT_EXIT for its supervisor to start a clean one (systemd's Restart=on-failure, a container's restart policy).
import { Counter } from 'prom-client';
import { describedFault, type Logger } from './log.ts';
import { metrics } from './metrics.ts';

/** EX_SOFTWARE (sysexits.h): an internal error; distinct from the CLI's 1, 2, 3 and 78. */
export const UNCAUGHT_EXIT = 70;

const unhandledRejections = new Counter({
  name: 'scopebase_unhandled_rejections_total',
  help: 'Promise rejections no code handled (a bug: each is logged at error level, 10 every 10 s one by one); the process kept serving',
  registers: [metrics],
});

/** Stray rejections logged one by one in each window; past them, one line at its end says how many more there were. */
export const REJECTIONS_LOGGED_PER_WINDOW = 10;
export const REJECTION_LOG_WINDOW_MS = 10_000;

/**
 * Logs a stray rejection, at most REJECTIONS_LOGGED_PER_WINDOW a window: a tenant that could make one per request
 * would otherwise flood the log (and the disk under it). The counter stays exact; the summary names the last one.
 */
function rejectionLog(logger: Logger): (reason: unknown) => void {
  let windowStart = -Infinity;
  let logged = 0;
  let notLogged = 0;
  let last: unknown;
  return (reason) => {
    const now = performance.now();
    if (now - windowStart >= REJECTION_LOG_WINDOW_MS) {
      windowStart = now;
      logged = 0;
    }
    if (logged < REJECTIONS_LOGGED_PER_WINDOW) {
      logged++;
      logger.error({ error: describedFault(reason) }, 'unhandled promise rejection (a bug): logged, counted in scopebase_unhandled_rejections_total, the process keeps serving');
      return;
    }
    last = reason;
    if (notLogged++ > 0) return; // the window's summary is already due
    setTimeout(() => {
      logger.error({ notLogged, last: describedFault(last) }, `${notLogged} more unhandled promise rejections (a bug) were not logged one by one: at most ${REJECTIONS_LOGGED_PER_WINDOW} are every ${REJECTION_LOG_WINDOW_MS / 1000} s; scopebase_unhandled_rejections_total counts every one, and the process keeps serving`);
      notLogged = 0;
      last = undefined;
    }, windowStart + REJECTION_LOG_WINDOW_MS - now).unref();
  };
}

/** Installs the policy for a server (`start`, `serve`); CLI commands keep Node's own (exit on either). */
export function handleProcessFaults(logger: Logger): void {
  unhandledRejections.inc(0);
  const log = rejectionLog(logger);
  process.on('unhandledRejection', (reason) => {
    unhandledRejections.inc();
    log(reason);
  });
  process.on('uncaughtException', (err) => {
    try {
      logger.fatal({ error: describedFault(err) }, `uncaught exception (a bug): the process exits with ${UNCAUGHT_EXIT} for its supervisor to restart it`);
    } finally {
      process.exit(UNCAUGHT_EXIT); // pino writes what it holds on exit
    }
  });
}
