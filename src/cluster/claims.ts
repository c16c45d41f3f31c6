// New databases this node claimed that no write has made yet, and the writes admitted to each database: a claim whose
// writes all failed is given back (DESIGN.md, "A failed first write"), so typo'd or failing names leave no key in etcd.

/**
 * Per database: how many writes were admitted and are not over yet, whether this node's claim is still unwritten,
 * and the release under way. The release starts only when the last admitted write is over; a write admitted during
 * it waits for it and is then admitted afresh (claiming again, or following the new placement).
 */
export class Claims {
  private readonly admitted = new Map<string, number>();
  private readonly unwritten = new Set<string>();
  private readonly releasing = new Map<string, Promise<void>>();
  /** Gives the claim back; resolves once this node's view of placement no longer admits a write under it. */
  private readonly release: (key: string) => Promise<void>;
  /** Whether the database's file exists on this node now. */
  private readonly exists: (key: string) => boolean;

  constructor(release: (key: string) => Promise<void>, exists: (key: string) => boolean) {
    this.release = release;
    this.exists = exists;
  }

  /**
   * Before a write's admission: waits out a release under way, then counts the write. The count is taken in the same
   * turn as the last check, so no release can start between them. Each `enter` is matched by one `leave`.
   */
  async enter(key: string): Promise<void> {
    for (let r = this.releasing.get(key); r !== undefined; r = this.releasing.get(key)) await r;
    this.admitted.set(key, (this.admitted.get(key) ?? 0) + 1);
  }

  /** This node's claim of a new database succeeded: nothing of it exists yet. */
  claimed(key: string): void {
    this.unwritten.add(key);
  }

  /** Not to be shipped or given back: a claim whose first write is still to end. */
  isUnwritten(key: string): boolean {
    return this.unwritten.has(key);
  }

  /**
   * An admitted write is over, whatever its outcome. The last one over of a claim nothing was made of (no file: the
   * executor removes what a failed first write made) gives the claim back; the returned promise ends with that.
   */
  leave(key: string): Promise<void> {
    const n = (this.admitted.get(key) ?? 1) - 1;
    if (n > 0) {
      this.admitted.set(key, n);
      return Promise.resolve();
    }
    this.admitted.delete(key);
    if (!this.unwritten.has(key)) return Promise.resolve();
    this.unwritten.delete(key);
    if (this.exists(key)) return Promise.resolve(); // made (a write, or an execute that changed nothing at version 0): kept
    const released = this.release(key).catch(() => {}).finally(() => this.releasing.delete(key));
    this.releasing.set(key, released);
    return released;
  }
}

/** `work` tried again every 100 ms until it succeeds; undefined once `until` (performance.now()) has passed. */
export async function retrying<T>(work: () => Promise<T>, until: number): Promise<T | undefined> {
  for (;;) {
    try {
      return await work();
    } catch {
      if (performance.now() > until) return undefined;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
