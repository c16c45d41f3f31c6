// Databases the source said it does not have, remembered briefly: reads of one made-up name (a thousand at once, or
// one after another) ask the source once per ABSENT_FOR_MS instead of once each. An event of the database forgets it.

/** How long a source's "no such database" answers reads of that name (a database made meanwhile waits this long). */
export const ABSENT_FOR_MS = 2000;
/** Names remembered at most: a client making names up fills this, the oldest go first. */
const MAX_NAMES = 10_000;

export class AbsentNames {
  /** Name → until when (the clock's ms), oldest first. */
  private readonly until = new Map<string, number>();
  private readonly now: () => number;

  /** `now`: a monotonic clock in ms (tests pass their own). */
  constructor(now: () => number = () => performance.now()) {
    this.now = now;
  }

  has(key: string): boolean {
    const until = this.until.get(key);
    if (until === undefined) return false;
    if (until > this.now()) return true;
    this.until.delete(key);
    return false;
  }

  add(key: string): void {
    const now = this.now();
    this.until.delete(key); // to the end: the map stays in expiry order
    this.until.set(key, now + ABSENT_FOR_MS);
    for (const [name, until] of this.until) {
      if (until > now && this.until.size <= MAX_NAMES) break;
      this.until.delete(name);
    }
  }

  delete(key: string): void {
    this.until.delete(key);
  }
}
