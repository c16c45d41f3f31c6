// What a server process does with a fault no request owns (a timer's throw, an event handler's, a promise nobody
// awaited): one process serves every org, so the policy is chosen here once (docs/reliability.md, "Faults outside a
// request"). A stray rejection is logged and counted, and the process keeps serving: the work it belonged to is lost,
// the rest is sound. An uncaught exception leaves state half-changed somewhere unknown: logged, then the process exits
// UNCAUGHT_EXIT for its supervisor to start a clean one (systemd's Restart=on-failure, a container's restart policy).
import { Counter } from 'prom-client';
import type { Logger } from './log.ts';
import { metrics } from './metrics.ts';

/** EX_SOFTWARE (sysexits.h): an internal error; distinct from the CLI's 1, 2, 3 and 78. */
export const UNCAUGHT_EXIT = 70;

const unhandledRejections = new Counter({
  name: 'scopebase_unhandled_rejections_total',
  help: 'Promise rejections no code handled (a bug: each is logged at error level); the process kept serving',
  registers: [metrics],
});

/**
 * What is logged of a fault (as `error`, not `err`, whose serializer would name its type Object): its type, message,
 * code and stack. Not the error itself: pino would write its every property, and one may hold headers or secrets.
 */
function described(fault: unknown): Record<string, unknown> {
  if (!(fault instanceof Error)) return { type: typeof fault, message: String(fault).slice(0, 500) };
  const code = (fault as { code?: unknown }).code;
  return { type: fault.name, message: fault.message, ...(typeof code === 'string' ? { code } : {}), stack: fault.stack };
}

/** Installs the policy for a server (`start`, `serve`); CLI commands keep Node's own (exit on either). */
export function handleProcessFaults(logger: Logger): void {
  unhandledRejections.inc(0);
  process.on('unhandledRejection', (reason) => {
    unhandledRejections.inc();
    logger.error({ error: described(reason) }, 'unhandled promise rejection (a bug): logged, counted in scopebase_unhandled_rejections_total, the process keeps serving');
  });
  process.on('uncaughtException', (err) => {
    try {
      logger.fatal({ error: described(err) }, `uncaught exception (a bug): the process exits with ${UNCAUGHT_EXIT} for its supervisor to restart it`);
    } finally {
      process.exit(UNCAUGHT_EXIT); // pino writes what it holds on exit
    }
  });
}
