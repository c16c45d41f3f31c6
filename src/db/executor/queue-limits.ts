// How long a job may wait for an executor, and how it is refused when it may not: nothing of it ran.

/** A queue not empty for this long is standing, not a burst (see maxWait). */
export const STANDING_AFTER_MS = 500;

/** A job refused before it started: nothing of it ran. */
export class QueueError extends Error {
  readonly reason: 'timeout' | 'full' | 'standing';

  constructor(reason: QueueError['reason'], message: string) {
    super(message);
    this.reason = reason;
  }
}

/**
 * How long a request may have waited by `now`, given when its queue was last empty. CoDel for request queues (as in
 * "Fail at Scale", Facebook 2015): a burst gets the whole queue timeout, but a queue that has not emptied for
 * STANDING_AFTER_MS is overloaded, and serving its requests late would not serve more of them: past the target
 * they are refused, so those that are served are served promptly.
 */
export function maxWait(lastEmptyAt: number, now: number, timeoutMs: number, targetMs: number): number {
  return now - lastEmptyAt > STANDING_AFTER_MS ? Math.min(targetMs, timeoutMs) : timeoutMs;
}

export function waitedTooLong(waitedMs: number): QueueError {
  return new QueueError('timeout', `the database service is overloaded: this request waited ${Math.round(waitedMs)} ms for an executor and did not start (the limit is DB_QUEUE_TIMEOUT_MS, or DB_QUEUE_TARGET_MS while requests pile up); nothing of it ran, retry after a second`);
}
