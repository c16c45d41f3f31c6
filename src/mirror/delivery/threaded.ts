// Mirror delivery on its own thread (thread.ts), seen from the main thread: commit hints go over, saved lane states
// come back into a DeliveryView that answers status, the retention floor and the metrics without waiting.
// The main thread serves HTTP and the executors' frames; delivery's one-event-at-a-time round trips no longer queue
// behind that work, and its CPU (HTTP client, signing, change-log reads, acknowledgements) can use another core. The
// change-log pages the thread leaves to executors (feed.ts) are read at its request and passed on here as text, never
// parsed on this thread.
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { ChangeFeed, MirrorGate, MirrorReport, MirrorState, Scope } from '../../db/contract.ts';
import type { MirrorConfig } from '../../shared/config.ts';
import { ApiError } from '../../shared/errors.ts';
import type { Logger } from '../../shared/log.ts';
import { backoffDelay } from './backoff.ts';
import { scopeKey } from './lane.ts';
import * as m from './metrics.ts';
import { DeliveryStore } from './store.ts';
import type { FromThread, GateChange, Hint, PageAnswer, PageRequest, Tally, ThreadSettings, ToThread } from './thread-protocol.ts';
import { DeliveryView } from './view.ts';

/** How long close() waits for the thread to finish in-flight attempts and save them before stopping it. */
const CLOSE_GRACE_MS = 5_000;
/** Commit hints go to the thread at most this often (ms)… */
const HINT_EVERY_MS = 1;
/** …and this often while delivery yields to a write flood: its lanes are busy anyway, and each message costs serving. */
const HINT_EVERY_MS_YIELDING = 50;
/** A thread that dies after living this long restarts in ~0.5 s; one that keeps dying backs off up to a minute. */
const HEALTHY_AFTER_MS = 60_000;

export interface MirrorDelivery extends MirrorReport {
  /** Resolves when the delivery thread's start-up scan of databases on disk has finished. */
  readonly recovered: Promise<void>;
  /** Only with `gated`: what a cluster node tells delivery (db/contract.ts's MirrorGate). */
  readonly cluster: MirrorGate;
  close(): Promise<void>;
}

export interface DeliveryThreadOptions {
  /** Commit hints from the db service (the thread reads change logs from the files itself, but for what `pages` reads). */
  feed: Pick<ChangeFeed, 'onCommit'>;
  /** A page of a change log as text (DbService.readChangePage), read by an executor: the thread asks for the ones it leaves. */
  pages(scope: Scope, since: number, limit: number): Promise<Uint8Array>;
  mirrors: MirrorConfig[];
  dataDir: string;
  logger: Logger;
  timeoutMs: number;
  maxBackoffMs: number;
  stallAfterMs: number;
  concurrency: number;
  baseBackoffMs?: number;
  /** A cluster node: nothing leaves until `cluster` grants it. */
  gated?: boolean;
}

export function startDeliveryThread(opts: DeliveryThreadOptions): MirrorDelivery {
  const log = opts.logger.child({ component: 'mirror-delivery' });
  // The saved state is read here too, so status and the floor are right from the first request.
  const store = new DeliveryStore(join(opts.dataDir, 'mirrors.sqlite'));
  const view = new DeliveryView(opts.mirrors.map((c) => c.name), opts.stallAfterMs, store.all());
  store.close();
  const settings: ThreadSettings = {
    mirrors: opts.mirrors, dataDir: opts.dataDir, timeoutMs: opts.timeoutMs, maxBackoffMs: opts.maxBackoffMs,
    stallAfterMs: opts.stallAfterMs, concurrency: opts.concurrency, baseBackoffMs: opts.baseBackoffMs, logLevel: log.levelVal,
    gated: opts.gated ?? false,
  };
  // The gate as last told, sent whole to a restarted thread.
  const grants = new Map<string, Hint>();
  let leaseUntil = 0;
  const hints = new Map<string, Hint>();
  let hintsQueued = false;
  let hintsSentAt = -Infinity;
  let yielding = false;
  let closing = false;
  let restarts = 0;
  let markRecovered!: () => void;
  const recovered = new Promise<void>((resolve) => (markRecovered = resolve));

  let thread: Worker;
  let threadExited: Promise<void>;
  start();

  function start(): void {
    const startedAt = performance.now();
    yielding = false;
    const w = new Worker(new URL('./thread-entry.js', import.meta.url), { workerData: settings, name: 'mirror-delivery' });
    w.unref(); // delivery alone never keeps a process alive; close() ends it
    if (settings.gated) w.postMessage({ type: 'gate', change: { grants: [...grants.values()], revoked: [], revokeAll: true, leaseUntil } } satisfies ToThread);
    w.on('message', (message: FromThread) => {
      try {
        if (message.type === 'read') read(w, message);
        else onMessage(message);
      } catch (e) {
        log.error({ err: e }, 'mirror delivery report not applied'); // never thrown into the loop: it serves every org
      }
    });
    w.on('error', (e) => log.error({ err: e }, 'mirror delivery thread failed'));
    thread = w;
    threadExited = new Promise((resolve) => w.once('exit', () => resolve()));
    w.on('exit', (code) => {
      if (closing) return;
      // Deliveries resume from mirrors.sqlite; the new thread's start-up scan finds every backlog, hinted or not.
      restarts = performance.now() - startedAt > HEALTHY_AFTER_MS ? 1 : restarts + 1;
      const delay = backoffDelay({ baseMs: 500, maxMs: 60_000 }, restarts);
      log.error({ code, restartInMs: delay }, 'mirror delivery thread stopped; restarting it');
      setTimeout(() => {
        try {
          if (!closing) start();
        } catch (e) {
          log.error({ err: e }, 'mirror delivery thread could not start'); // e.g. out of memory; delivery resumes at the next start
        }
      }, delay).unref();
    });
  }

  function post(message: ToThread): void {
    thread.postMessage(message);
  }

  function onMessage(message: FromThread): void {
    switch (message.type) {
      case 'report':
        for (const lane of message.lanes) view.apply(lane);
        count(message.tally);
        yielding = message.yielding;
        m.yielding.set(yielding ? 1 : 0);
        return;
      case 'log':
        log[message.level](message.obj, message.msg);
        return;
      case 'recovered':
        markRecovered();
        return;
      case 'closed':
        return;
    }
  }

  /** Has an executor read the page the thread asked for, and answers the thread that asked (not a restarted one). */
  function read(w: Worker, request: PageRequest): void {
    void readPage(opts.pages, request).then(([message, transfer]) => {
      try {
        w.postMessage(message satisfies ToThread, transfer);
      } catch (e) {
        log.error({ err: e }, 'mirror delivery page not sent');
      }
    });
  }

  /**
   * Something up to `version` is in the database's change log. Hints leave at the end of the event-loop turn, and
   * at most one message per HINT_EVERY_MS: under a write flood a turn is short and its hints add nothing (a draining
   * lane reads the current version with every batch), while each message costs the busy main thread.
   */
  function hint(scope: Scope, version: number): void {
    if (closing) return;
    const key = scopeKey(scope);
    const queued = hints.get(key);
    if (!queued) hints.set(key, [scope.org, scope.repo, scope.database, version]);
    else if (version > queued[3]) queued[3] = version;
    if (hintsQueued) return;
    hintsQueued = true;
    const wait = hintsSentAt + (yielding ? HINT_EVERY_MS_YIELDING : HINT_EVERY_MS) - performance.now();
    if (wait <= 0) setImmediate(sendHints);
    else setTimeout(sendHints, wait);
  }

  function sendHints(): void {
    hintsQueued = false;
    if (closing || hints.size === 0) return;
    hintsSentAt = performance.now();
    post({ type: 'hints', hints: [...hints.values()] });
    hints.clear();
  }

  opts.feed.onCommit((scope, version) => {
    view.noteVersion(scope, version);
    hint(scope, version);
  });
  const unregister = m.registerLaneSource(() => view.lanes());
  const gate = (change: Partial<GateChange>) => {
    if (!closing) post({ type: 'gate', change: { grants: [], revoked: [], revokeAll: false, leaseUntil: null, ...change } });
  };
  const cluster: MirrorGate = {
    grant(scope, upTo) {
      const key = scopeKey(scope);
      const had = grants.get(key);
      if (had && had[3] >= upTo) return;
      const hint: Hint = [scope.org, scope.repo, scope.database, upTo];
      grants.set(key, hint);
      gate({ grants: [hint] });
    },
    revoke(scope) {
      if (grants.delete(scopeKey(scope))) gate({ revoked: [[scope.org, scope.repo, scope.database]] });
    },
    revokeAll() {
      grants.clear();
      gate({ revokeAll: true });
    },
    leaseUntil(at) {
      leaseUntil = at;
      gate({ leaseUntil: at });
    },
    cursors: (scope) => view.cursors(scope),
    seed(scope, cursors) {
      const list = Object.entries(cursors).filter(([name, v]) => view.hasMirror(name) && Number.isSafeInteger(v) && v > 0);
      if (list.length > 0 && !closing) post({ type: 'seed', cursors: list.map(([name, v]) => [name, scope.org, scope.repo, scope.database, v]) });
    },
  };

  return {
    recovered,
    cluster,
    states(scope: Scope, currentVersion: number): MirrorState[] {
      view.noteVersion(scope, currentVersion);
      if (currentVersion > (view.floor(scope) ?? currentVersion)) hint(scope, currentVersion); // a missed hint heals here
      return view.states(scope, currentVersion);
    },
    acknowledgedFloor: (scope) => view.floor(scope),
    async close() {
      if (closing) return;
      closing = true;
      unregister();
      m.yielding.set(0);
      markRecovered();
      post({ type: 'close' });
      const grace = setTimeout(() => void thread.terminate(), CLOSE_GRACE_MS);
      await threadExited; // at once if the thread had died and was waiting to restart
      clearTimeout(grace);
    },
  };
}

/** The thread's counters, added to this process's Prometheus registry. */
function count(t: Tally): void {
  for (const [mirror, n] of Object.entries(t.attempts)) m.attempts.inc({ mirror }, n);
  for (const [mirror, n] of Object.entries(t.delivered)) m.delivered.inc({ mirror }, n);
  for (const [mirror, n] of Object.entries(t.skipped)) m.skipped.inc({ mirror }, n);
  for (const [mirror, kinds] of Object.entries(t.failures)) {
    for (const [kind, n] of Object.entries(kinds)) m.failures.inc({ mirror, kind }, n);
  }
  for (const [mirror, lag] of Object.entries(t.lag)) m.lag.add(mirror, lag);
  for (const by of ['thread', 'executor'] as const) if (t.reads[by] > 0) m.changeLogReads.inc({ by }, t.reads[by]);
  if (t.budgetTrips > 0) m.readBudgetTrips.inc(t.budgetTrips);
}

/** The answer to a thread's page request, with what to transfer; never rejects. */
export async function readPage(pages: DeliveryThreadOptions['pages'], { id, scope: [org, repo, database], since, limit }: PageRequest): Promise<[PageAnswer, ArrayBuffer[]]> {
  try {
    // Exactly the page's bytes, moved: the executor's frame may be a view of a larger buffer, which a clone would copy whole.
    const body = new Uint8Array(await pages({ org, repo, database }, since, limit));
    return [{ type: 'page', id, body }, [body.buffer]];
  } catch (e) {
    const error = e instanceof ApiError ? { code: e.code, message: e.message, details: e.details } : { code: null, message: e instanceof Error ? e.message : String(e) };
    return [{ type: 'page', id, error }, []];
  }
}
