// What the CLI prints: aligned tables for people, JSON for scripts, and one line per failure with its exit code (SPEC 10).
import type { ScopebaseError, Value } from '../client/index.ts';

export const EXIT = { ok: 0, refused: 1, usage: 2, unreachable: 3, config: 78 } as const;

/** An ordinary failure: one line saying what to do, and the exit code. */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(exitCode: number, message: string) {
    super(message);
    this.exitCode = exitCode;
  }
}

export function usageError(message: string): CliError {
  return new CliError(EXIT.usage, message);
}

/** A value for a person: NULL, blobs as x'hex' (shortened), bigints as digits. */
export function showValue(v: Value): string {
  if (v === null) return 'NULL';
  if (v instanceof Uint8Array) {
    const hex = Buffer.from(v.subarray(0, 32)).toString('hex');
    return `x'${hex}'${v.length > 32 ? `… (${v.length} bytes)` : ''}`;
  }
  return String(v).replace(/\r?\n/g, '\\n');
}

/** A value as SPEC 4.2 writes it, for --json. */
export function wireValue(v: Value): unknown {
  if (typeof v === 'bigint') return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : { $bigint: v.toString() };
  if (v instanceof Uint8Array) return { $blob: Buffer.from(v).toString('base64') };
  return v;
}

const width = (s: string) => [...s].length;

/** Columns padded to their widest cell, a rule under the header; numbers right-aligned. */
export function table(columns: string[], rows: Value[][]): string {
  const cells = rows.map((r) => r.map(showValue));
  const widths = columns.map((c, i) => Math.max(width(c), ...cells.map((r) => width(r[i] ?? ''))));
  const numeric = columns.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || typeof r[i] === 'bigint' || r[i] === null));
  const line = (r: string[]) => r.map((s, i) => (numeric[i] ? s.padStart(widths[i]!) : s.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(columns), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n') + '\n';
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}

/** The server speaks of its HTTP API; a person at the CLI needs the command that does it. */
function cliHint(e: ScopebaseError): string {
  if (e.code === 'read_only') return '; writes go through `scopebase execute`';
  if (e.code === 'database_not_found') return '; `scopebase execute` or `scopebase migrate` with this --database creates it';
  if (/holds more than one statement/.test(e.message)) return '; several statements: `scopebase execute --file script.sql` (or `-` for standard input), or `scopebase shell`';
  return '';
}

/** A client error as one line with what to do, and its exit code. */
export function explain(e: ScopebaseError, ctx: { url: string; org: string; repo: string }): CliError {
  const where = `${ctx.org}/${ctx.repo} at ${ctx.url}`;
  switch (e.code) {
    case 'network':
      return new CliError(EXIT.unreachable, `cannot reach ${ctx.url} (${(e.details?.cause as string | undefined) ?? e.message}): is scopebase running? Start it with \`npx scopebase start\`, or pass --url`);
    case 'timeout':
      return new CliError(EXIT.unreachable, `${ctx.url} did not answer in time: check the server, or pass --timeout with more milliseconds`);
    case 'unauthorized':
      return new CliError(EXIT.refused, `the server refused the secret for ${ctx.org}/${ctx.repo}: pass --secret "$(npx scopebase secret ${ctx.org}/${ctx.repo})" run where the server runs (same RUNTIME_ROOT_KEY or DATA_DIR)`);
    case 'unknown_host':
      return new CliError(EXIT.refused, `${ctx.url} does not serve the org "${ctx.org}": check --org and the server's BASE_DOMAIN (${e.message})`);
    default: {
      const id = e.requestId ? ` (request ${e.requestId})` : '';
      return new CliError(EXIT.refused, `${where}: ${e.status ? `${e.status} ` : ''}${e.code}: ${e.message}${id}${cliHint(e)}`);
    }
  }
}
