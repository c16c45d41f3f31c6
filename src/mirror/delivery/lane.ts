// The delivery state of one (mirror, database): what was acknowledged, what is known to exist, and why it is failing.
import type { ChangeEvent, Scope } from '../../db/contract.ts';

export class Lane {
  readonly mirror: string;
  readonly scope: Scope;
  /** Highest version the mirror acknowledged with a 2xx. */
  delivered = 0;
  /** Highest acknowledged version saved in mirrors.sqlite (saved once per turn, so it may trail `delivered`). */
  saved = 0;
  /** When `saved` was last written (ms since the epoch). */
  savedAt = 0;
  /** Highest version known to exist (commit hints, status, recovery scan, change log reads). */
  known = 0;
  lastError: string | null = null;
  lastSuccessAt: number | null = null;
  /** Start of the current run of failures; null while healthy. */
  failingSince: number | null = null;
  attempts = 0;
  /** A drain is running (or waiting for a delivery slot). */
  active = false;
  /** A retry is scheduled. */
  timer: NodeJS.Timeout | null = null;
  /** Events read ahead from the change log, oldest first, all above `delivered`. */
  buffer: ChangeEvent[] = [];
  stallReported = false;
  /** A mirror's recovery kick ended this failure run's backoff once already (outage.ts): a lane failing alone gets one. */
  resumed = false;
  /** A cursor reported by another node while a drain was running: applied when it ends. */
  seedTo = 0;

  constructor(mirror: string, scope: Scope) {
    this.mirror = mirror;
    this.scope = scope;
  }

  pending(): number {
    return Math.max(0, this.known - this.delivered);
  }

  isStalled(now: number, stallAfterMs: number): boolean {
    return this.failingSince !== null && now - this.failingSince >= stallAfterMs;
  }
}

export function scopeKey(scope: Scope): string {
  return `${scope.org}/${scope.repo}/${scope.database}`;
}
