// SPEC 4.2: parameters must match the statement. SQLite binds NULL to any parameter left unbound, and node:sqlite
// says only "column index out of range" for an extra one, so the parameters a statement takes are read from its
// text (skipping strings, quoted names and comments) and compared with what the request sent.
import { ApiError } from '../shared/errors.ts';
import { ID_CHAR, skipQuotedOrComment, variableEnd } from './statement-end.ts';

/** The parameters of one statement: how many slots (SQLite numbers them 1…count), and the named ones by bare name. */
export interface ParamSlots {
  count: number;
  /** Bare name (without `:`, `@` or `$`) → its slot. */
  named: Map<string, number>;
  /** Slots of `?` and `?NNN`. */
  positional: number[];
  /** Each slot's name as SQLite gives it (sqlite3_bind_parameter_name): `:a`, `?3`; null for a bare `?` or an unused slot. */
  names: (string | null)[];
}

/**
 * Whether a request's key can be a parameter's bare name: what SQLite reads as one parameter after `:`, `@`, `$` or
 * `#` — identifier characters (`$` and every character past ASCII included: `a$b`, `é`), with `::` inside and a
 * Tcl-style `(…)` suffix (`a::b`, `a(x)`). `:a` is no bare name (its prefix is kept); `$a` is, for `:$a`.
 */
export function isBareName(key: string): boolean {
  const paren = key.indexOf('(');
  if (!ID_CHAR.test(paren === -1 ? key : key.slice(0, paren))) return false; // a name needs an identifier character before any `(`
  if (paren !== -1 && !key.endsWith(')')) return false; // `$a(x` is no parameter to SQLite
  return variableEnd(`$${key}`, 0) === key.length + 1;
}

export function paramSlots(sql: string): ParamSlots {
  const named = new Map<string, number>();
  const tokens = new Set<string>();
  const positional: number[] = [];
  const names: (string | null)[] = [];
  let count = 0;
  const n = sql.length;
  for (let i = 0; i < n;) {
    const c = sql[i]!;
    const skipped = skipQuotedOrComment(sql, i);
    if (skipped !== null) {
      i = skipped;
    } else if (c === '?') {
      let j = i + 1;
      while (j < n && sql[j]! >= '0' && sql[j]! <= '9') j++;
      const slot = j > i + 1 ? Number(sql.slice(i + 1, j)) : count + 1;
      positional.push(slot);
      if (j > i + 1) names[slot - 1] ??= `?${slot}`;
      count = Math.max(count, slot);
      i = j;
    } else if ((c === ':' || c === '@' || c === '$' || c === '#') && variableEnd(sql, i) > i + 1) {
      // As SQLite's tokenizer reads it: `$a::b` and `$a(x)` (Tcl's names) are one parameter each, `#a` is one too.
      const j = variableEnd(sql, i);
      // `:a` and `@a` are two parameters to SQLite (two slots), one name to the request: both take params.a.
      const token = sql.slice(i, j);
      if (!tokens.has(token)) {
        tokens.add(token);
        names[count++] = token;
        if (!named.has(token.slice(1))) named.set(token.slice(1), count);
      }
      i = j;
    } else if (ID_CHAR.test(c)) {
      let j = i + 1;
      while (j < n && ID_CHAR.test(sql[j]!)) j++; // a word: a `$` inside one (x$y) is no parameter
      i = j;
    } else {
      i++;
    }
  }
  return { count, named, positional, names: Array.from({ length: count }, (_, k) => names[k] ?? null) };
}

/** Throws 400 invalid_request naming the statement and the parameter when `given` does not fit `slots`. */
export function checkParams(slots: ParamSlots, given: unknown, statement: number): void {
  const where = `statements[${statement}]`;
  if (slots.positional.length > 0 && slots.named.size > 0) {
    throw new ApiError('invalid_request', `${where} mixes positional (?) and named (:name) parameters, which cannot be bound together: use one kind`, { statement });
  }
  const takes = () => `${where} takes ${slots.count} parameter${slots.count === 1 ? '' : 's'}`; // only for an error
  if (given === undefined || given === null) {
    if (slots.count === 0) return;
    // The first parameter the statement uses: the lowest slot of `?`/`?NNN` (`SELECT ?, ?5`: ?1), or the first name.
    const slot = slots.positional.length > 0 ? Math.min(...slots.positional) : 0;
    const first = slot > 0 ? `?${slot}` : slots.names.find((name) => name !== null)!;
    throw new ApiError('invalid_request', `${takes()} and none were sent: ${first} is missing`, { statement, parameter: slot > 0 ? slot : first.slice(1) });
  }
  if (Array.isArray(given)) {
    if (slots.named.size > 0) throw new ApiError('invalid_request', `${where} has named parameters (:name); send "params" as an object keyed by the bare name`, { statement });
    if (given.length < slots.count) {
      // The first slot the statement uses that params does not reach (`SELECT ?5` with one value: ?5, not ?2).
      const missing = Math.min(...slots.positional.filter((slot) => slot > given.length));
      throw new ApiError('invalid_request', `${takes()} (params[0] binds ?1, params[k] binds ?k+1): ?${missing} is missing`, { statement, parameter: missing });
    }
    if (given.length > slots.count) throw new ApiError('invalid_request', `${takes()}; params[${slots.count}] is extra`, { statement, parameter: slots.count + 1 });
    return;
  }
  const keys = Object.keys(given as object);
  if (slots.positional.length > 0) throw new ApiError('invalid_request', `${where} has positional parameters (?); send "params" as an array`, { statement });
  for (const k of keys) {
    // `$a` for `$a`: a `$` is an identifier character, so the key passed as a bare name (of `:$a`) until here.
    if (k[0] === '$' && !slots.named.has(k) && slots.named.has(k.slice(1))) {
      throw new ApiError('invalid_request', `${where}: "params" has ${JSON.stringify(k)}: named parameters are keyed by their bare name, ${JSON.stringify(k.slice(1))}`, { statement, parameter: k });
    }
  }
  for (const [name, slot] of slots.named) {
    // Named as the statement writes it (`@n`, `$a::b`), and by the key that binds it.
    if (!keys.includes(name)) throw new ApiError('invalid_request', `${where}: the named parameter ${slots.names[slot - 1]} is missing from "params" (keyed ${JSON.stringify(name)})`, { statement, parameter: name });
  }
  for (const k of keys) {
    if (!slots.named.has(k)) throw new ApiError('invalid_request', `${where}: "params" has ${JSON.stringify(k)}, which the statement does not use`, { statement, parameter: k });
  }
}

/**
 * Named params (keyed by bare name) as node:sqlite binds them with bare names off: keyed by each slot's own token, so
 * `:a` and `@a` both get params.a. The object has no prototype: a parameter named `__proto__` is a key like any other.
 */
export function bindNamed(slots: ParamSlots, given: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = Object.create(null);
  for (const token of slots.names) if (token !== null && token[0] !== '?') out[token] = given[token.slice(1)];
  return out;
}
