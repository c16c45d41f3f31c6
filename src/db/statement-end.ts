// node:sqlite prepares only the first statement of a text and drops the rest silently. One `sql` holds one
// statement (more go in `statements`), so a second one is refused instead of being lost.
// These scanners run on the main process's event loop (request checks, the libSQL pipeline) over texts of up to
// DB_MAX_BODY_BYTES: they read character codes and jump with indexOf, never a regular expression or a new string
// per character (a 30 MB text held the loop 2–6 s, every org's requests waiting; docs/security.md).

const SEMI = 59;
const DASH = 45;
const SLASH = 47;
const STAR = 42;
const QUOTE = 39;
const LPAREN = 40;
const RPAREN = 41;
const COLON = 58;

/** `[A-Za-z_]`: what starts a word to terminatedEnd. */
const wordStart = (c: number) => (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 95;
/** `[A-Za-z0-9_$]`: what goes on in a word to terminatedEnd. */
const wordChar = (c: number) => wordStart(c) || (c >= 48 && c <= 57) || c === 36;
/** ID_CHAR, on a character code. */
const idChar = (c: number) => wordChar(c) || c >= 0x80;
/**
 * JavaScript's `\s` (Unicode's spaces too): what the blank checks have always taken for a space. Compared by code, not
 * tested with /\s/ on a new string: 16 million U+00A0 after a `RELEASE` held every org's requests 1.5 s.
 */
export const isSpace = (c: number) => c === 32 || (c >= 9 && c <= 13) || (c >= 0xa0 && (c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a)
  || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff));
/** SQLite's spaces (sqlite3Isspace): ASCII only; a character past ASCII is part of a name. */
const sqliteSpace = (c: number) => c === 32 || (c >= 9 && c <= 13);
/** `$`, `@`, `:`, `#`: what starts a parameter. */
const paramPrefix = (c: number) => c === 36 || c === 64 || c === COLON || c === 35;
/** The closing character of a string literal or quoted name that `c` opens (`'`, `"`, `` ` ``, `[`), else 0. */
const closerOf = (c: number) => (c === QUOTE || c === 34 || c === 96 ? c : c === 91 ? 93 : 0);

/** Index just past the first statement's terminating `;` (or the text's length), skipping strings and comments. */
function firstStatementEnd(sql: string): number {
  return terminatedEnd(sql) ?? sql.length;
}

/** Past a comment, string literal or quoted name starting at `i`, or null when none starts there (shared by params.ts). */
export function skipQuotedOrComment(sql: string, i: number): number | null {
  const c = sql.charCodeAt(i);
  const n = sql.length;
  if (c === DASH && sql.charCodeAt(i + 1) === DASH) {
    const nl = sql.indexOf('\n', i);
    return nl === -1 ? n : nl + 1;
  }
  if (c === SLASH && sql.charCodeAt(i + 1) === STAR) {
    const end = sql.indexOf('*/', i + 2);
    return end === -1 ? n : end + 2;
  }
  const close = closerOf(c);
  if (close === 0) return null;
  // A doubled closer is one character of the literal; an unterminated one runs to the end (n + 1).
  const closing = String.fromCharCode(close);
  for (let j = i + 1; ;) {
    const k = sql.indexOf(closing, j);
    if (k === -1) return n + 1;
    if (sql.charCodeAt(k + 1) !== close) return k + 1;
    j = k + 2;
  }
}

/** The last word read (its bounds in the text) is `word`, upper-cased: compared without making a string per word. */
function wordIs(sql: string, start: number, end: number, word: string): boolean {
  return start >= 0 && end - start === word.length && sql.slice(start, end).toUpperCase() === word;
}

/** Index just past the first `;`-terminated statement from `from`, or null when the text has none yet. */
function terminatedEnd(sql: string, from = 0): number | null {
  let i = from;
  let last = -1; // the last word's start (-1: none since the last token that was not a space or a comment)
  let lastEnd = -1;
  let words = 0;
  let trigger = false;
  const n = sql.length;
  while (i < n) {
    const c = sql.charCodeAt(i);
    if (c === SEMI) {
      // Inside CREATE TRIGGER ... BEGIN ... END the body's own `;` do not end the statement.
      if (!trigger || wordIs(sql, last, lastEnd, 'END')) return i + 1;
      last = -1;
      i++;
    } else if (wordStart(c)) {
      let j = i + 1;
      while (j < n && wordChar(sql.charCodeAt(j))) j++;
      last = i;
      lastEnd = j;
      words++;
      if (words <= 3 && wordIs(sql, i, j, 'TRIGGER')) trigger = true;
      i = j;
    } else if (paramPrefix(c)) {
      i = variableEnd(sql, i);
      last = -1;
    } else {
      const skipped = c === DASH || c === SLASH || closerOf(c) !== 0 ? skipQuotedOrComment(sql, i) : null;
      if (skipped !== null) {
        if (c !== DASH && c !== SLASH) last = -1; // a comment keeps the word before it
        i = skipped;
      } else {
        if (!isSpace(c)) last = -1;
        i++;
      }
    }
  }
  return null;
}

/** SQLite's identifier characters (IdChar): letters, digits, `_`, `$`, and every character past ASCII. */
export const ID_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;

/**
 * Past a parameter token starting at `i` (`$name`, `@name`, `:name`, `#name`), as SQLite's tokenizer reads it: with
 * `::` inside and a Tcl-style `(…)` suffix, which takes any character up to `)` or a space, quotes included. Read
 * as SQL, `$a('x)` opened a string here that SQLite never sees, and hid statements after it (attack round 2).
 * `i + 1` when no name follows the prefix. Shared by params.ts, which names parameters by these tokens.
 */
export function variableEnd(sql: string, i: number): number {
  let j = i + 1;
  let named = 0;
  const n = sql.length;
  while (j < n) {
    const c = sql.charCodeAt(j);
    if (idChar(c)) {
      named++;
      j++;
    } else if (c === LPAREN && named > 0) {
      do j++; while (j < n && !sqliteSpace(sql.charCodeAt(j)) && sql.charCodeAt(j) !== RPAREN);
      return sql.charCodeAt(j) === RPAREN ? j + 1 : j;
    } else if (c === COLON && sql.charCodeAt(j + 1) === COLON) {
      j += 2;
    } else {
      break;
    }
  }
  return j;
}

/** The bytes of the longest blob literal (`X'…'`) in a text, read as SQLite's tokenizer reads it (strings, names, comments and parameters are not literals). */
export function longestBlobLiteral(sql: string): number {
  let longest = 0;
  const n = sql.length;
  for (let i = 0; i < n;) {
    const c = sql.charCodeAt(i);
    if ((c === 120 || c === 88) && sql.charCodeAt(i + 1) === QUOTE) {
      const end = skipQuotedOrComment(sql, i + 1)!;
      longest = Math.max(longest, Math.floor((end - i - 3) / 2));
      i = end;
    } else if (paramPrefix(c)) {
      i = variableEnd(sql, i);
    } else if (idChar(c)) {
      do i++; while (i < n && idChar(sql.charCodeAt(i)));
    } else {
      i = skipQuotedOrComment(sql, i) ?? i + 1;
    }
  }
  return longest;
}

/** Past the spaces and comments from `i` (and `;` too with `semis`): where the next token starts, or `n` (at most). */
export function blankEnd(sql: string, i: number, semis = true, n = sql.length): number {
  while (i < n) {
    const c = sql.charCodeAt(i);
    if ((c === DASH && sql.charCodeAt(i + 1) === DASH) || (c === SLASH && sql.charCodeAt(i + 1) === STAR)) i = skipQuotedOrComment(sql, i)!;
    else if ((semis && c === SEMI) || isSpace(c)) i++;
    else return i;
  }
  return n;
}

/** True when the text holds no statement: only comments, spaces and `;`. */
export function isBlank(sql: string): boolean {
  return blankEnd(sql, 0) === sql.length;
}

/** True when the text holds more than one statement (comments, spaces and `;` after the first do not count). */
export function hasSecondStatement(sql: string): boolean {
  return blankEnd(sql, firstStatementEnd(sql)) < sql.length;
}

/** Where each statement of a text starts (past the spaces and comments before it; `;`-ended or not), in order. */
export function* statementStarts(sql: string): Generator<number> {
  for (let at = 0; at < sql.length;) {
    yield blankEnd(sql, at, false);
    const end = terminatedEnd(sql, at);
    if (end === null) return;
    at = end;
  }
}

/**
 * One statement as sqlite_schema keeps it, ended by a `;` that is read as its end: one that ends in a `--` or an
 * unclosed `/*` comment gets the comment closed first, as sqlite3's .dump does (shell.c printSchemaLine). Without
 * that a dump's `;` fell inside the comment, and an import lost every statement after it.
 */
export function terminated(sql: string): string {
  for (const close of ['', '*/', '\n']) {
    const text = `${sql}${close};`;
    if (terminatedEnd(text) === text.length) return text;
  }
  return `${sql};`;
}

/**
 * Each statement of a text, read in place: from `at` (the blanks before it included) or `start` (past them) to `end`
 * (through its `;`); `done`: false for the unfinished rest at the end. Nothing is copied.
 */
export function* statementSpans(sql: string): Generator<{ at: number; start: number; end: number; done: boolean }> {
  let at = 0;
  for (let end = terminatedEnd(sql, at); end !== null; end = terminatedEnd(sql, at)) {
    const start = blankEnd(sql, at, true, end);
    if (start < end) yield { at, start, end, done: true };
    at = end;
  }
  const start = blankEnd(sql, at);
  if (start < sql.length) yield { at, start, end: sql.length, done: false };
}

/** The complete (`;`-ended) statements of a text, and the unfinished rest (the CLI's --file and shell). */
export function splitStatements(sql: string): { statements: string[]; rest: string } {
  const statements: string[] = [];
  let rest = '';
  for (const s of statementSpans(sql)) {
    if (s.done) statements.push(sql.slice(s.at, s.end).trim());
    else rest = sql.slice(s.at).trim();
  }
  return { statements, rest };
}
