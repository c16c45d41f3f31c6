// The delivery thread (a worker_threads entry, started by threaded.ts): runs the delivery engine off the main
// thread, which serves HTTP and talks to the executors. It reads change logs from the database files itself (feed.ts),
// but for the pages it leaves to executors. Traffic with the main thread: commit hints and those pages in (asked for
// over the port), saved lane states, counters and log lines out.
import { join } from 'node:path';
import { parentPort, workerData } from 'node:worker_threads';
import { ChangeLogPages } from './change-pages.ts';
import { CpuPressure, lowerThreadPriority, SAMPLE_EVERY_MS } from './cpu-pressure.ts';
import { createDeliveryEngine, type DeliveryLog, type DeliveryMetrics } from './engine.ts';
import { DeliveryFeed } from './feed.ts';
import { DeliveryGate } from './gate.ts';
import type { Lane } from './lane.ts';
import { addLag, emptyTally, type FromThread, type LaneReport, type LogLevel, type Tally, type ThreadSettings, type ToThread } from './thread-protocol.ts';

/** Saved lane states and counters go to the main thread at most this often (status and metrics lag by as much). */
const REPORT_EVERY_MS = 10;
const LEVELS: Record<LogLevel, number> = { debug: 20, info: 30, warn: 40, error: 50 };
lowerThreadPriority();

const settings = workerData as ThreadSettings;
const port = parentPort!;
const send = (message: FromThread) => port.postMessage(message);

const changed = new Map<Lane, boolean>(); // lane → dropped
let tally: Tally = emptyTally();
let reportTimer: NodeJS.Timeout | null = null;

function scheduleReport(): void {
  reportTimer ??= setTimeout(report, REPORT_EVERY_MS);
}

function report(): void {
  if (reportTimer) clearTimeout(reportTimer);
  reportTimer = null;
  const lanes: LaneReport[] = [...changed].map(([l, dropped]) => ({
    mirror: l.mirror, ...l.scope, saved: l.saved, known: l.known, lastError: l.lastError, failingSince: l.failingSince, dropped,
  }));
  changed.clear();
  send({ type: 'report', lanes, tally, yielding: pressure.shouldYield });
  tally = emptyTally();
}

function count(by: Record<string, number>, mirror: string, n = 1): void {
  by[mirror] = (by[mirror] ?? 0) + n;
  scheduleReport();
}

const metrics: DeliveryMetrics = {
  attempt: (mirror) => count(tally.attempts, mirror),
  delivered: (mirror) => count(tally.delivered, mirror),
  skipped: (mirror, events) => count(tally.skipped, mirror, events),
  failure(mirror, kind) {
    const byKind = (tally.failures[mirror] ??= {});
    byKind[kind] = (byKind[kind] ?? 0) + 1;
    scheduleReport();
  },
  lag(mirror, seconds) {
    addLag((tally.lag[mirror] ??= { counts: [], sum: 0 }), seconds);
    scheduleReport();
  },
};

/** Errors become plain objects (what pino's serializer would write): a message must be cloneable. */
function cloneable(obj: object): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    out[k] = v instanceof Error ? { type: v.name, message: v.message, stack: v.stack, code: (v as { code?: unknown }).code } : v;
  }
  return out;
}

const relay = (level: LogLevel) => (obj: object, msg: string) => {
  if (LEVELS[level] >= settings.logLevel) send({ type: 'log', level, obj: cloneable(obj), msg });
};
const log: DeliveryLog = { debug: relay('debug'), info: relay('info'), warn: relay('warn'), error: relay('error') };

const pressure = new CpuPressure();
const sampler = setInterval(() => {
  const was = pressure.shouldYield;
  if (pressure.sample() !== was) scheduleReport();
}, SAMPLE_EVERY_MS);
sampler.unref();

const pages = new ChangeLogPages(send);
const feed = new DeliveryFeed(join(settings.dataDir, 'db'), pages, {
  read(by) {
    tally.reads[by]++;
    scheduleReport();
  },
  tripped(org, repo, periodMs) {
    tally.budgetTrips++;
    log.warn({ org, repo, periodMs }, 'change-log reads of this repo took more of the mirror delivery thread than their budget; executors read them for a while');
  },
});
const gate = settings.gated ? new DeliveryGate() : null;
const engine = createDeliveryEngine({
  feed, log, metrics,
  mirrors: settings.mirrors, dataDir: settings.dataDir, timeoutMs: settings.timeoutMs, maxBackoffMs: settings.maxBackoffMs,
  stallAfterMs: settings.stallAfterMs, concurrency: settings.concurrency, baseBackoffMs: settings.baseBackoffMs,
  onSaved(lane, dropped) {
    changed.set(lane, dropped);
    scheduleReport();
  },
  shouldYield: () => pressure.shouldYield,
  gate: gate ? (scope, version) => gate.allows(scope, version) : undefined,
});
void engine.recovered.then(() => send({ type: 'recovered' }));

port.on('message', (message: ToThread) => {
  if (message.type === 'hints') {
    for (const [org, repo, database, version] of message.hints) feed.hint({ org, repo, database }, version);
  } else if (message.type === 'gate') {
    for (const { scope, upTo } of gate?.apply(message.change) ?? []) feed.hint(scope, upTo); // what the engine hears of a commit
  } else if (message.type === 'seed') {
    for (const [mirror, org, repo, database, version] of message.cursors) engine.seed({ org, repo, database }, mirror, version);
  } else if (message.type === 'page') {
    pages.answer(message);
  } else if (message.type === 'close') {
    clearInterval(sampler);
    const closed = engine.close();
    feed.close(); // after close() began: a read cut short now is not recorded as the lane's failure
    void closed.then(() => {
      report();
      send({ type: 'closed' });
      port.close(); // nothing else keeps the thread alive: it ends
    });
  }
});
