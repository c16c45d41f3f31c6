// SPEC 2: names are checked before anything touches the file system or authentication.
import { ApiError } from './errors.ts';

const ORG = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
const REPO = /^[a-z0-9][a-z0-9._-]{0,99}$/;
const DATABASE = /^[a-z0-9][a-z0-9_-]{0,63}$/;

/** Each rule as a person reads it: an error page shows these instead of the pattern API clients get. */
const IN_WORDS: [RegExp, string][] = [
  [ORG, 'lowercase letters, digits and "-", starting and ending with a letter or digit, up to 63 characters'],
  [REPO, 'lowercase letters, digits, ".", "_" and "-", starting with a letter or digit, up to 100 characters'],
  [DATABASE, 'lowercase letters, digits, "_" and "-", starting with a letter or digit, up to 64 characters'],
];

/** A name refusal for a page: `repo name "X" must match ^…$` becomes `… is not allowed: names are lowercase letters, …`. */
export function nameRuleInWords(message: string): string {
  for (const [rule, words] of IN_WORDS) {
    if (message.includes(`must match ${rule.source}`)) return message.replace(`must match ${rule.source}`, `is not allowed: names are ${words}`);
  }
  return message;
}

export function isOrgName(s: string): boolean {
  return ORG.test(s);
}

/** Repo names are lowercased by the caller first; `.`/`..` and a leading `_` cannot match REPO. */
export function isRepoName(s: string): boolean {
  return REPO.test(s);
}

export function isDatabaseName(s: string): boolean {
  return DATABASE.test(s);
}

export function checkOrg(s: string): string {
  if (!isOrgName(s)) throw new ApiError('invalid_name', `org name ${quote(s)} must match ${ORG.source}`);
  return s;
}

/** Lowercases A–Z only: Unicode case folding maps look-alikes into the name rules (KELVIN SIGN "K" → "k"). */
export function lowerAscii(s: string): string {
  return s.replace(/[A-Z]+/g, (m) => m.toLowerCase());
}

export function checkRepo(raw: string): string {
  const s = lowerAscii(raw);
  if (!isRepoName(s)) throw new ApiError('invalid_name', `repo name ${quote(raw)} must match ${REPO.source}`);
  return s;
}

export function checkDatabase(value: unknown): string {
  if (value === undefined) return 'main';
  if (typeof value !== 'string') throw new ApiError('invalid_request', '"database" must be a string');
  if (!isDatabaseName(value)) throw new ApiError('invalid_name', `database name ${quote(value)} must match ${DATABASE.source} (names are case-sensitive)`);
  return value;
}

/** Quotes a caller-supplied name for a message, cut short so an error never echoes a huge input. */
export function quote(s: string): string {
  return JSON.stringify(s.length > 80 ? `${s.slice(0, 80)}…` : s);
}

/**
 * `s` without its trailing `/`s, read back from its end: /\/+$/ is tried at every `/` and reads each run to its end,
 * so a trusted proxy's x-forwarded-prefix of 15,000 slashes and an `x` cost the event loop 250 ms (quadratic).
 */
export function withoutTrailingSlashes(s: string): string {
  let end = s.length;
  while (end > 0 && s.charCodeAt(end - 1) === 47) end--;
  return end === s.length ? s : s.slice(0, end);
}

/** A path's escapes decoded; a malformed escape (`%zz`) leaves it as sent, for the name checks to refuse. */
export function safeDecode(path: string): string {
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}
