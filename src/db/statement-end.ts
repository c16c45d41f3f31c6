// node:sqlite prepares only the first statement of a text and drops the rest silently. One `sql` holds one
// statement (more go in `statements`), so a second one is refused instead of being lost.

/** Index just past the first statement's terminating `;` (or the text's length), skipping strings and comments. */
function firstStatementEnd(sql: string): number {
  return terminatedEnd(sql) ?? sql.length;
}

/** Past a comment, string literal or quoted name starting at `i`, or null when none starts there (shared by params.ts). */
export function skipQuotedOrComment(sql: string, i: number): number | null {
  const c = sql[i]!;
  const n = sql.length;
  if (c === '-' && sql[i + 1] === '-') {
    const nl = sql.indexOf('\n', i);
    return nl === -1 ? n : nl + 1;
  }
  if (c === '/' && sql[i + 1] === '*') {
    const end = sql.indexOf('*/', i + 2);
    return end === -1 ? n : end + 2;
  }
  if (c === "'" || c === '"' || c === '`' || c === '[') {
    const close = c === '[' ? ']' : c;
    let j = i + 1;
    while (j < n && !(sql[j] === close && sql[j + 1] !== close)) j += sql[j] === close ? 2 : 1;
    return j + 1;
  }
  return null;
}

/** Index just past the first statement's terminating `;`, or null when the text has none yet. */
function terminatedEnd(sql: string): number | null {
  let i = 0;
  let lastWord = '';
  let words = 0;
  let trigger = false;
  const n = sql.length;
  while (i < n) {
    const c = sql[i]!;
    const skipped = skipQuotedOrComment(sql, i);
    if (skipped !== null) {
      if (c !== '-' && c !== '/') lastWord = '';
      i = skipped;
    } else if (c === ';') {
      // Inside CREATE TRIGGER ... BEGIN ... END the body's own `;` do not end the statement.
      if (!trigger || lastWord === 'END') return i + 1;
      lastWord = '';
      i++;
    } else if (c === '$' || c === '@' || c === ':' || c === '#') {
      i = variableEnd(sql, i);
      lastWord = '';
    } else if (/[A-Za-z_]/.test(c)) {
      let j = i + 1;
      while (j < n && /[A-Za-z0-9_$]/.test(sql[j]!)) j++;
      lastWord = sql.slice(i, j).toUpperCase();
      words++;
      if (words <= 3 && lastWord === 'TRIGGER') trigger = true;
      i = j;
    } else {
      if (!/\s/.test(c)) lastWord = '';
      i++;
    }
  }
  return null;
}

/** SQLite's identifier characters (IdChar): letters, digits, `_`, `$`, and every character past ASCII. */
export const ID_CHAR = /[A-Za-z0-9_$\u0080-\uffff]/;
/** SQLite's spaces (sqlite3Isspace): ASCII only; a character past ASCII is part of a name. */
const SPACE = /[\t\n\v\f\r ]/;

/**
 * Past a parameter token starting at `i` (`$name`, `@name`, `:name`, `#name`), as SQLite's tokenizer reads it: with
 * `::` inside and a Tcl-style `(…)` suffix, which takes any character up to `)` or a space, quotes included. Read
 * as SQL, `$a('x)` opened a string here that SQLite never sees, and hid statements after it (attack round 2).
 * `i + 1` when no name follows the prefix. Shared by params.ts, which names parameters by these tokens.
 */
export function variableEnd(sql: string, i: number): number {
  let j = i + 1;
  let named = 0;
  while (j < sql.length) {
    const c = sql[j]!;
    if (ID_CHAR.test(c)) {
      named++;
      j++;
    } else if (c === '(' && named > 0) {
      do j++; while (j < sql.length && !SPACE.test(sql[j]!) && sql[j] !== ')');
      return sql[j] === ')' ? j + 1 : j;
    } else if (c === ':' && sql[j + 1] === ':') {
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
  for (let i = 0; i < sql.length;) {
    const c = sql[i]!;
    if ((c === 'x' || c === 'X') && sql[i + 1] === "'") {
      const end = skipQuotedOrComment(sql, i + 1)!;
      longest = Math.max(longest, Math.floor((end - i - 3) / 2));
      i = end;
    } else if (c === '$' || c === '@' || c === ':' || c === '#') {
      i = variableEnd(sql, i);
    } else if (ID_CHAR.test(c)) {
      do i++; while (i < sql.length && ID_CHAR.test(sql[i]!));
    } else {
      i = skipQuotedOrComment(sql, i) ?? i + 1;
    }
  }
  return longest;
}

/** Comments, spaces and `;`: what does not make a statement. */
const BLANK = /--[^\n]*(\n|$)|\/\*[\s\S]*?(\*\/|$)|[\s;]+/g;

/** True when the text holds no statement: only comments, spaces and `;`. */
export function isBlank(sql: string): boolean {
  return sql.replace(BLANK, '') === '';
}

/** True when the text holds more than one statement (comments, spaces and `;` after the first do not count). */
export function hasSecondStatement(sql: string): boolean {
  const rest = sql.slice(firstStatementEnd(sql));
  return rest.replace(BLANK, '') !== '';
}

/** The complete (`;`-ended) statements of a text, and the unfinished rest (the CLI's --file and shell). */
export function splitStatements(sql: string): { statements: string[]; rest: string } {
  const statements: string[] = [];
  let rest = sql;
  for (let end = terminatedEnd(rest); end !== null; end = terminatedEnd(rest)) {
    const head = rest.slice(0, end);
    if (head.replace(BLANK, '') !== '') statements.push(head.trim());
    rest = rest.slice(end);
  }
  return { statements, rest: rest.replace(BLANK, '') === '' ? '' : rest.trim() };
}
