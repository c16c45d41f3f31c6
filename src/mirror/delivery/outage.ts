// A mirror back from an outage. Each of its lanes waits out its own backoff (up to DB_MIRROR_MAX_BACKOFF_MS, 60 s by
// default), so after the mirror came back a write waited up to that long, and every database with a backlog too
// (10–20 s at a 20 s cap in test/mirror-outage.test.ts). Two ways back sooner, both bounded so a down mirror is not
// stampeded: a new commit may end one waiting lane's backoff a second (a probe), and the first success after the
// mirror answered nothing for OUTAGE_MS ends every waiting lane's backoff once (a recovery kick).
import type { Lane } from './lane.ts';

/** A mirror that failed and acknowledged nothing for this long is back from an outage at its next success. */
const OUTAGE_MS = 1000;
/** At most one probe a mirror this often, and one at a time. */
const PROBE_EVERY_MS = 1000;

export class Outage {
  private lastSuccess = -Infinity;
  private failedSinceSuccess = false;
  private probedAt = -Infinity;
  private probing: Lane | null = null;

  /** An acknowledgement; true when it ends an outage (the caller kicks the waiting lanes). `now`: performance.now(). */
  succeeded(now: number): boolean {
    const back = this.failedSinceSuccess && now - this.lastSuccess >= OUTAGE_MS;
    this.lastSuccess = now;
    this.failedSinceSuccess = false;
    return back;
  }

  failed(): void {
    this.failedSinceSuccess = true;
  }

  /** May `lane`, waiting out its backoff, try now for a new commit? Taken when true, until `ended(lane)`. */
  probe(lane: Lane, now: number): boolean {
    if (this.probing !== null || now - this.probedAt < PROBE_EVERY_MS) return false;
    this.probing = lane;
    this.probedAt = now;
    return true;
  }

  /** A lane's drain ended. */
  ended(lane: Lane): void {
    if (this.probing === lane) this.probing = null;
  }
}
