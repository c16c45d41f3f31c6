// JSON-line logs (pino). Secrets never reach a log: auth headers and cookies are redacted at the source.
import { pino, type Logger } from 'pino';

export type { Logger };

export const REDACT_PATHS = [
  'req.headers.authorization', 'req.headers.cookie', 'res.headers["set-cookie"]',
  'headers.authorization', 'headers.cookie', '*.secret', '*.token', '*.value', '*.password', '*.clientSecret',
];

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino({ level, redact: { paths: REDACT_PATHS, censor: '[redacted]' }, base: { pid: process.pid } }, destination as never);
}

/**
 * Where `scopebase start` logs: JSON lines (for collectors) unless a person watches a terminal, then one readable
 * line each through pino-pretty when it is installed (a clone's `npm ci`; `--omit=dev` leaves JSON). LOG_FORMAT
 * (`json` or `pretty`) decides instead.
 */
export async function logDestination(format: string | undefined): Promise<NodeJS.WritableStream | undefined> {
  if (format === 'json' || (format !== 'pretty' && !process.stdout.isTTY)) return undefined;
  try {
    const { default: pretty } = await import('pino-pretty');
    return pretty({ colorize: process.stdout.isTTY === true, translateTime: 'SYS:HH:MM:ss', ignore: 'pid,hostname', singleLine: true });
  } catch {
    return undefined; // not installed (a production install): JSON lines
  }
}

/**
 * What is logged of a fault (as `error`, not `err`, whose serializer would name its type Object): its type, message,
 * code and stack. Not the error itself: pino would write its every property, and one may hold headers or secrets.
 */
export function describedFault(fault: unknown): Record<string, unknown> {
  if (!(fault instanceof Error)) return { type: typeof fault, message: String(fault).slice(0, 500) };
  const code = (fault as { code?: unknown }).code;
  return { type: fault.name, message: fault.message, ...(typeof code === 'string' ? { code } : {}), stack: fault.stack };
}
