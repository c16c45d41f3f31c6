// New databases this node claimed that no write has made yet, and the writes admitted to each database: a claim
// nothing was made of is given back once no write came for a while (DESIGN.md, "A failed first write"), so typo'd or
// failing names leave no key in etcd, and a loop of failing writes costs one claim, not two txns per request.

/** A claim nothing was made of is given back after this long with no write to its database admitted. */
export const GIVE_BACK_IDLE_MS = 3000;
/** Claims of one repo on one node whose first write has not succeeded yet (or whose txn is under way); past it, 429. */
export const UNWRITTEN_PER_REPO = 8;

const repoOf = (key: string) => key.slice(0, key.lastIndexOf('/'));

/**
 * Per database: how many writes were admitted and are not over yet, whether this node's claim is still unwritten,
 * and the release under way. A release starts only when no admitted write is left and none came for `idleMs`; a
 * write admitted during it waits for it and is then admitted afresh (claiming again, or following the new placement).
 */
export class Claims {
  private readonly admitted = new Map<string, number>();
  private readonly unwritten = new Set<string>();
  /** Claims whose txn is under way: counted against the repo's limit, and unwritten to `act` (no follower sync). */
  private readonly reserved = new Set<string>();
  private readonly perRepo = new Map<string, number>();
  private readonly idle = new Map<string, NodeJS.Timeout>();
  private readonly releasing = new Map<string, Promise<void>>();
  /** Gives the claim back; resolves once this node's view of placement no longer admits a write under it. */
  private readonly release: (key: string) => Promise<void>;
  /** Whether the database's file exists on this node now. */
  private readonly exists: (key: string) => boolean;
  private readonly idleMs: number;
  private closed = false;

  constructor(release: (key: string) => Promise<void>, exists: (key: string) => boolean, idleMs = GIVE_BACK_IDLE_MS) {
    this.release = release;
    this.exists = exists;
    this.idleMs = idleMs;
  }

  /**
   * Before a write's admission: waits out a release under way, then counts the write (and keeps its claim). The count
   * is taken in the same turn as the last check, so no release can start between them. Each `enter` is matched by one `leave`.
   */
  async enter(key: string): Promise<void> {
    for (let r = this.releasing.get(key); r !== undefined; r = this.releasing.get(key)) await r;
    this.admitted.set(key, (this.admitted.get(key) ?? 0) + 1);
    this.cancelIdle(key);
  }

  /** An admitted write is over, whatever its outcome: the last one over of an unwritten claim starts its idle wait. */
  leave(key: string): void {
    const n = (this.admitted.get(key) ?? 1) - 1;
    if (n > 0) return void this.admitted.set(key, n);
    this.admitted.delete(key);
    this.whenIdle(key);
  }

  /** Before a claim's txn: false when the repo has UNWRITTEN_PER_REPO claims unwritten or under way on this node. */
  reserve(key: string): boolean {
    if (this.unwritten.has(key) || this.reserved.has(key)) return true;
    if ((this.perRepo.get(repoOf(key)) ?? 0) >= UNWRITTEN_PER_REPO) return false;
    this.reserved.add(key);
    this.count(key, 1);
    return true;
  }

  /**
   * This node's claim of a new database succeeded (nothing of it exists yet), or its txn failed (`ok` false: the
   * reservation goes). Also a placement found still this node's, with no file, after a give-back that did not apply,
   * and a follower's takeover of a claim never written: given back in turn once idle.
   */
  claimed(key: string, ok = true): void {
    const wasReserved = this.reserved.delete(key);
    if (ok && !this.unwritten.has(key)) {
      this.unwritten.add(key);
      if (!wasReserved) this.count(key, 1);
    } else if (wasReserved) this.count(key, -1);
    if (ok) this.whenIdle(key);
  }

  /** Not to be shipped, moved or given a new follower: a claim whose first write is still to succeed. */
  isUnwritten(key: string): boolean {
    return this.unwritten.has(key) || this.reserved.has(key);
  }

  /** Gives an idle unwritten claim back now (its follower is gone); false when a write is admitted to it. */
  giveBackNow(key: string): boolean {
    if (this.admitted.has(key) || !this.unwritten.has(key) || this.releasing.has(key)) return false;
    this.cancelIdle(key);
    this.giveBack(key);
    return true;
  }

  /**
   * At shutdown (requests drained): every unwritten claim with no write admitted is given back now. Left in place, it
   * would outlive this node's lease with no file anywhere, and a follower restarted too could not take it.
   */
  async giveBackIdle(): Promise<void> {
    for (const key of [...this.unwritten]) this.giveBackNow(key);
    await Promise.all(this.releasing.values());
  }

  close(): void {
    this.closed = true;
    for (const t of this.idle.values()) clearTimeout(t);
    this.idle.clear();
  }

  private whenIdle(key: string): void {
    if (this.closed || this.admitted.has(key) || !this.unwritten.has(key) || this.releasing.has(key)) return;
    if (this.exists(key)) return this.forget(key); // made (a write, or an execute that changed nothing at version 0): kept
    this.cancelIdle(key);
    const timer = setTimeout(() => {
      this.idle.delete(key);
      if (!this.admitted.has(key) && this.unwritten.has(key) && !this.releasing.has(key)) this.giveBack(key);
    }, this.idleMs);
    timer.unref();
    this.idle.set(key, timer);
  }

  private giveBack(key: string): void {
    if (this.exists(key)) return this.forget(key);
    this.forget(key);
    const released = this.release(key).catch(() => {}).finally(() => {
      this.releasing.delete(key);
      this.whenIdle(key); // the placement was found still this node's (claimed again): tried again once idle
    });
    this.releasing.set(key, released);
  }

  private forget(key: string): void {
    if (this.unwritten.delete(key)) this.count(key, -1);
    this.cancelIdle(key);
  }

  private cancelIdle(key: string): void {
    const t = this.idle.get(key);
    if (t === undefined) return;
    clearTimeout(t);
    this.idle.delete(key);
  }

  private count(key: string, by: number): void {
    const repo = repoOf(key);
    const n = (this.perRepo.get(repo) ?? 0) + by;
    if (n > 0) this.perRepo.set(repo, n);
    else this.perRepo.delete(repo);
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
