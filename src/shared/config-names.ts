// Variables with one of the product's prefixes that nothing reads are almost always typos (DB_SYNCC): each is named
// with the closest variable the configuration does read, so a setting that silently did nothing is caught at start.
const PREFIXES = /^(DB|ACCOUNT|MIRROR|CLUSTER)_/;

/** Edit distance (insertions, deletions, substitutions), for names of a few dozen characters. */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) row.push(Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1)));
    prev = row;
  }
  return prev[b.length]!;
}

/** An env whose reads are recorded: every name the configuration looks at, set or not. */
export function recordingReads<T extends Record<string, string | undefined>>(env: T): { env: T; read: Set<string> } {
  const read = new Set<string>();
  const proxy = new Proxy(env, { get: (target, name) => (typeof name === 'string' && read.add(name), target[name as keyof T]) });
  return { env: proxy, read };
}

/** How far a name may be from a known one to be taken for its typo. */
const near = (name: string, d: number): boolean => d <= Math.max(2, Math.floor(name.length / 4));

/**
 * One warning per set variable with a product prefix that was never read, naming the closest one that is; and per
 * set variable without one that is a near miss of an unprefixed setting (MAX_CONECTIONS; the env holds PATH, HOME…).
 */
export function unknownVariables(env: Record<string, string | undefined>, read: ReadonlySet<string>): string[] {
  const known = [...read].filter((n) => PREFIXES.test(n));
  const plain = [...read].filter((n) => !PREFIXES.test(n) && n.length >= 8);
  const closest = (name: string, among: string[]) => among.map((k) => ({ k, d: distance(name, k) })).sort((a, b) => a.d - b.d)[0];
  const misses = Object.keys(env).filter((n) => !read.has(n) && !PREFIXES.test(n)).flatMap((name) => {
    const best = closest(name, plain);
    return best && near(name, best.d) ? [`${name} is not a scopebase setting and does nothing; did you mean ${best.k}?`] : [];
  });
  const prefixed = Object.keys(env).filter((n) => PREFIXES.test(n) && !read.has(n)).map((name) => {
    const best = closest(name, known);
    return `${name} is not a scopebase setting and does nothing${best && near(name, best.d) ? `; did you mean ${best.k}?` : ''}`;
  });
  return [...prefixed, ...misses].sort();
}
