// How late this process's event loop runs: the time a request that has just arrived already waited unseen in the
// kernel. Past a limit the process is saturated, and a request answered 503 at once costs less than one served late.
// The figure is the smallest of the last few windows' worst lateness: one long pause (a start-up, a collection) is
// not saturation; only a loop late in every window is.
const SAMPLE_MS = 10;
const WINDOW_MS = 100;
const WINDOWS = 3;

let timer: NodeJS.Timeout | null = null;
let users = 0;
let expected = 0;
let worst = 0;
let windowEnd = 0;
let delay = 0;
const recent: number[] = [];

/** The least of the last windows' worst lateness, in ms. */
export function loopDelayMs(): number {
  return delay;
}

/** Starts measuring (shared by every user in the process); the returned callback stops this user's interest. */
export function watchLoopDelay(): () => void {
  if (users++ === 0) {
    expected = performance.now() + SAMPLE_MS;
    windowEnd = expected + WINDOW_MS;
    timer = setInterval(sample, SAMPLE_MS).unref();
  }
  let stopped = false;
  return () => {
    if (stopped) return;
    stopped = true;
    if (--users === 0 && timer) {
      clearInterval(timer);
      timer = null;
      delay = 0;
      recent.length = 0;
    }
  };
}

function sample(): void {
  const now = performance.now();
  worst = Math.max(worst, now - expected);
  expected = now + SAMPLE_MS;
  if (now >= windowEnd) {
    recent.push(worst);
    if (recent.length > WINDOWS) recent.shift();
    delay = recent.length < WINDOWS ? 0 : Math.min(...recent);
    worst = 0;
    windowEnd = now + WINDOW_MS;
  }
}
