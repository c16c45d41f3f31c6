// What the CLI prints: aligned tables for people, JSON for scripts, and one line per failure with its exit code (SPEC 10).
import type { ScopebaseError, Value } from '../client/index.ts';

export const EXIT = { ok: 0, refused: 1, usage: 2, unreachable: 3, config: 78 } as const;

/** SPEC 3's error object, which `--json` prints on stdout for a failure. */
export interface ErrorBody { code: string; message: string; details?: Record<string, unknown> }

/** The `code` of a failure the server did not name, by its exit code. */
const CODES: Record<number, string> = { [EXIT.refused]: 'failed', [EXIT.usage]: 'usage', [EXIT.unreachable]: 'unreachable', [EXIT.config]: 'configuration' };

/** An ordinary failure: one line saying what to do, and the exit code. */
export class CliError extends Error {
  readonly exitCode: number;
  readonly error: ErrorBody;
  readonly requestId: string | undefined;
  /** The command already printed its JSON document for this failure (verify's list of bad files). */
  readonly jsonPrinted: boolean;
  constructor(exitCode: number, message: string, opts: { error?: ErrorBody; requestId?: string; jsonPrinted?: boolean } = {}) {
    super(message);
    this.exitCode = exitCode;
    this.error = opts.error ?? { code: CODES[exitCode] ?? 'failed', message };
    this.requestId = opts.requestId;
    this.jsonPrinted = opts.jsonPrinted === true;
  }

  /** The failure as `--json` prints it: `{"error": {...}}`, with the request's id when the server answered. */
  json(): Record<string, unknown> {
    return { error: this.error, ...(this.requestId ? { requestId: this.requestId } : {}) };
  }
}

/** "1 table", "2 tables": a count with its noun, singular for one. */
export const count = (n: number, noun: string, plural = `${noun}s`): string => `${n} ${n === 1 ? noun : plural}`;

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
  return visible(String(v).replace(/\r?\n/g, '\\n'));
}

/**
 * A text from the server (a tenant's values, names, an error quoting them) with the control characters a terminal
 * acts on shown as escapes: ESC sequences set the title, write the clipboard (OSC 52) or link text elsewhere, and a
 * lone CR rewrites the line, so what is printed looks like other data. Tabs and line feeds stay.
 */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
export const visible = (s: string): string => s.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

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
  const widths = columns.map((c, i) => Math.max(width(visible(c)), ...cells.map((r) => width(r[i] ?? ''))));
  const numeric = columns.map((_, i) => rows.length > 0 && rows.every((r) => typeof r[i] === 'number' || typeof r[i] === 'bigint' || r[i] === null));
  const line = (r: string[]) => r.map((s, i) => (numeric[i] ? s.padStart(widths[i]!) : s.padEnd(widths[i]!))).join('  ').trimEnd();
  return [line(columns.map(visible)), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.map(line)].join('\n') + '\n';
}

/** A value as one shell word (a DATA_DIR with spaces stays one argument when pasted). */
export function shellWord(v: string): string {
  return /^[\w@%+=:,./-]+$/.test(v) ? v : `'${v.replaceAll("'", `'\\''`)}'`;
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value) + '\n');
}

/** The server speaks of its HTTP API; a person at the CLI needs the command that does it. */
function cliHint(e: ScopebaseError): string {
  if (e.code === 'read_only') return '; writes go through `scopebase execute`';
  // A migrate --baseline never creates one (the server says to import it first): no hint that it would.
  if (e.code === 'database_not_found') return /"baseline"/.test(e.message) ? '' : '; `scopebase execute` or `scopebase migrate` with this --database creates it';
  if (/holds more than one statement/.test(e.message)) return '; several statements: `scopebase execute --file script.sql` (or `-` for standard input), or `scopebase shell`';
  if (e.code === 'migration_conflict') return '; an applied migration is never edited: put the change in a new file (the next number)';
  if (e.code === 'invalid_request' && /mode=replace/.test(e.message)) return '; with the CLI: --mode replace';
  // restore-db's version out of reach (SPEC 4.11): the versions there are to pick from.
  if ((e.code === 'gone' && /restorable/.test(e.message)) || (e.code === 'invalid_request' && /is not reached yet/.test(e.message))) return '; `scopebase history` lists the versions with their times';
  return '';
}

/** What a failure names: the target, and where its URL and secret came from (an option, a SCOPEBASE_* variable; null: the default). */
interface Context { url: string; org: string; repo: string; urlFrom?: string | null; secretFrom?: string | null }

/** A client error as one line with what to do, and its exit code; --json gets the server's own error. */
export function explain(e: ScopebaseError, ctx: Context): CliError {
  const exitCode = e.code === 'network' || e.code === 'timeout' ? EXIT.unreachable : EXIT.refused;
  const line = explainLine(e, ctx);
  // With no reply (network, timeout) the line is the best message there is.
  const error: ErrorBody = { code: e.code, message: e.status ? e.message : line, ...(e.details ? { details: e.details } : {}) };
  return new CliError(exitCode, line, { error, ...(e.requestId ? { requestId: e.requestId } : {}) });
}

function explainLine(e: ScopebaseError, ctx: Context): string {
  // A URL a variable gave is not the one a PORT exported here would change: name the variable.
  const urlVariable = ctx.urlFrom?.startsWith('SCOPEBASE_') ? ctx.urlFrom : null;
  const url = urlVariable ? `${urlVariable} ${ctx.url}` : ctx.url;
  const otherServer = urlVariable ? `set ${urlVariable} to its URL, or pass --url` : 'export its PORT here, or pass --url';
  const secretFor = `${ctx.org}/${ctx.repo}`;
  const printed = `"$(npx scopebase secret ${secretFor})" run where the server runs`;
  switch (e.code) {
    case 'network':
      return `cannot reach ${url} (${(e.details?.cause as string | undefined) ?? e.message}): is scopebase running? Start it with \`npx scopebase start\`; a server on another port: ${otherServer}`;
    case 'timeout':
      return `${url} did not answer in time: check the server, or pass --timeout with more milliseconds`;
    case 'unauthorized':
      // The URL said: a PORT not exported here sends the command to whatever server holds the default port.
      if (ctx.secretFrom?.startsWith('SCOPEBASE_')) return `the server at ${url} refused the secret in ${ctx.secretFrom} for ${secretFor}: set ${ctx.secretFrom} to ${printed}, or unset it to derive the secret here (same RUNTIME_ROOT_KEY or DATA_DIR); another server: ${otherServer}`;
      if (ctx.secretFrom) return `the server at ${url} refused the ${ctx.secretFrom} given for ${secretFor}: pass ${ctx.secretFrom} ${printed}; another server: ${otherServer}`;
      return `the server at ${url} refused the secret for ${secretFor}: pass --secret ${printed} (same RUNTIME_ROOT_KEY or DATA_DIR); another server: ${otherServer}`;
    case 'unknown_host':
      return `${url} does not serve the org "${ctx.org}": check --org and the server's BASE_DOMAIN (${e.message})`;
    default: {
      const id = e.requestId ? ` (request ${e.requestId})` : '';
      return `${ctx.org}/${ctx.repo} at ${ctx.url}: ${e.status ? `${e.status} ` : ''}${e.code}: ${e.message}${id}${cliHint(e)}`;
    }
  }
}
