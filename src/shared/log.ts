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
