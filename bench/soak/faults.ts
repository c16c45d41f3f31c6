// The soak's faults (`npm run soak -- --faults`, issue 16), each during the mixed traffic over every database:
//   - kill -9 of the whole product at random moments, then a restart on the same DATA_DIR, N times;
//   - kill -9 of one executor process at random moments, N times (the product starts another);
//   - SIGSTOP of one executor for a while, then SIGCONT;
//   - a full disk: DATA_DIR is a real tmpfs and a ballast file takes every byte left, then is deleted (root only);
//   - a damaged database file (its own database, outside the traffic), damaged while the product is down;
//   - a mirror that accepts connections and never answers, until late in the run (bench/faults/mirror.ts).
// The soak's clock jumps (--clock-jump) go with them. While a fault is on, the traffic may see what the fault
// explains — no answer while the product is down, 507 while the disk is full — and nothing else (FaultWindows).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { processTree } from '../lib/proc.ts';
import { damage, DAMAGED_MESSAGE } from '../faults/damage.ts';
import { fillDisk } from '../faults/tmpfs.ts';
import type { SpawnedProduct } from '../../test/helpers/product.ts';
import type { JsonAnswer } from '../lib/http.ts';
import type { FaultMirror } from '../faults/mirror.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const GRACE_MS = 2_000; // answers that were on their way when a fault ended
/** From this share of the run on, nothing is faulted: the product's last lifetime, where its RSS and fds are judged. */
export const QUIET_AFTER = 0.7;

export type Kind = 'down' | 'full' | 'clock';

/** When the product was down or its disk full: an answer is excused by a fault only if their times overlap. */
export class FaultWindows {
  private readonly spans: { kind: Kind; from: number; to: number }[] = [];
  private readonly open = new Map<Kind, number>();
  begin(kind: Kind): void { this.open.set(kind, performance.now()); }
  end(kind: Kind): void {
    this.spans.push({ kind, from: this.open.get(kind)!, to: performance.now() + GRACE_MS });
    this.open.delete(kind);
  }
  /** Whether a request that ran from `start` to `end` met a fault of this kind. */
  covers(kind: Kind, start: number, end = performance.now()): boolean {
    if (this.open.has(kind) && this.open.get(kind)! <= end) return true;
    return this.spans.some((s) => s.kind === kind && s.from <= end && s.to >= start);
  }
  /** Whether `status` is what a fault explains for a request between `start` and `end`. */
  excuses(status: number, start: number, end = performance.now()): boolean {
    if (status === 0) return this.covers('down', start, end);
    if (status === 507) return this.covers('full', start, end);
    return false;
  }
}

export interface FaultPlan {
  seconds: number;
  /** kill -9 of the whole product, and of one executor, this many times each. */
  cycles: number;
  stopSeconds: number;
  /** Where the ballast goes to fill the disk; null when DATA_DIR is not a filesystem of its own. */
  tmpfsDir: string | null;
  damagedFile: string;
}

export interface FaultHost {
  product(): SpawnedProduct;
  /** kill -9 of every process of the product, `whileDown`, then a start on the same DATA_DIR and ports. */
  restart(whileDown: () => void): Promise<number>;
  /** POST /{repo}/_db/{op} on the damaged database. */
  damagedDb(op: string, body: Record<string, unknown>): Promise<JsonAnswer>;
  hangMirror: FaultMirror;
  windows: FaultWindows;
  log(s: string): void;
  bad: string[];
}

const executors = (p: SpawnedProduct) => [...processTree(p.child.pid!).keys()].filter((pid) => pid !== p.child.pid);
const signal = (pid: number, sig: NodeJS.Signals) => {
  try { process.kill(pid, sig); return true; } catch { return false; } // an idle extra executor may have exited
};

/** The damaged database answers 500 naming the damage (no server path) on a read, a write and status; the log names the file. */
async function checkDamaged(host: FaultHost, plan: FaultPlan): Promise<void> {
  for (const [op, body] of [['query', { sql: 'SELECT * FROM t' }], ['execute', { sql: 'INSERT INTO t VALUES (2)' }], ['status', {}]] as const) {
    let r = await host.damagedDb(op, body);
    for (let i = 0; i < 80 && (r.status === 503 || r.status === 507); i++) { // shed under load, or the disk full meanwhile
      await sleep(250);
      r = await host.damagedDb(op, body);
    }
    if (r.status !== 500 || r.json?.error?.code !== 'internal' || !DAMAGED_MESSAGE.test(r.json?.error?.message) || JSON.stringify(r.json).includes(plan.damagedFile)) {
      host.bad.push(`the damaged database's ${op} answered ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
    }
  }
  await sleep(200);
  const out = host.product().stdout() + host.product().stderr();
  if (!out.split('\n').some((l) => l.includes('database request failed') && l.includes('damaged.sqlite'))) host.bad.push('the log does not name the damaged file');
}

/**
 * Runs every fault at its random moment in [10 %, 65 %] of the run (each over by QUIET_AFTER: a full disk or a stop
 * lasts seconds), logging each. Resolves, once the hanging mirror answers again at QUIET_AFTER and the last fault is
 * over (one may run late behind the others), with that moment (performance.now()).
 */
export async function runFaults(host: FaultHost, plan: FaultPlan): Promise<number> {
  const t0 = performance.now();
  const at = (share: number) => t0 + share * plan.seconds * 1000;
  const random = () => 0.1 + Math.random() * (QUIET_AFTER - 0.15);
  const note = (line: string) => host.log(`fault at ${((performance.now() - t0) / 1000).toFixed(0)} s: ${line}`); // as it happens: a run is long
  let restarts = 0;
  const events: { when: number; what: string; run(): Promise<void> }[] = [];
  for (let i = 0; i < plan.cycles; i++) {
    events.push({ when: at(random()), what: 'kill -9 of the product', run: async () => {
      host.windows.begin('down');
      const damageNow = restarts === 1; // the second restart
      const ms = await host.restart(() => { if (damageNow) damage(plan.damagedFile); });
      host.windows.end('down');
      restarts++;
      if (damageNow) {
        await checkDamaged(host, plan);
        note(`a damaged database file since restart #${restarts}: 500 "the database file is damaged (SQLITE_NOTADB …)" on query, execute and status; the log names the file`);
      }
      note(`kill -9 of the product #${restarts}: serving again ${ms.toFixed(0)} ms after the kill`);
    } });
    events.push({ when: at(random()), what: 'kill -9 of an executor', run: async () => {
      const victim = executors(host.product())[0];
      note(victim !== undefined && signal(victim, 'SIGKILL') ? `kill -9 of executor ${victim}` : 'no executor to kill');
    } });
  }
  events.push({ when: at(random()), what: 'SIGSTOP of an executor', run: async () => {
    const victim = executors(host.product())[0];
    if (victim === undefined || !signal(victim, 'SIGSTOP')) return void note('no executor to stop');
    await sleep(plan.stopSeconds * 1000);
    signal(victim, 'SIGCONT');
    note(`executor ${victim} stopped (SIGSTOP) for ${plan.stopSeconds} s`);
  } });
  if (plan.tmpfsDir) {
    const dir = plan.tmpfsDir;
    events.push({ when: at(random()), what: 'a full disk', run: async () => {
      host.windows.begin('full');
      const bytes = fillDisk(join(dir, 'ballast'));
      await sleep(plan.stopSeconds * 1000);
      rmSync(join(dir, 'ballast'));
      host.windows.end('full');
      note(`the disk full for ${plan.stopSeconds} s (a ballast of ${(bytes / 2 ** 20).toFixed(0)} MiB took every byte left), then freed`);
    } });
  }
  events.sort((a, b) => a.when - b.when);
  host.hangMirror.mode = 'hang';
  const answerAt = setTimeout(() => { host.hangMirror.mode = 'answer'; }, plan.seconds * 1000 * QUIET_AFTER);
  for (const e of events) {
    await sleep(Math.max(0, e.when - performance.now()));
    try {
      await e.run();
    } catch (err) {
      host.bad.push(`${e.what}: ${(err as Error).message}`);
    }
  }
  await sleep(Math.max(0, at(QUIET_AFTER) - performance.now()));
  clearTimeout(answerAt);
  host.hangMirror.mode = 'answer';
  note(`a mirror that accepts connections and never answers, from the start to ${QUIET_AFTER * 100} % of the run: ${host.hangMirror.hung} deliveries left unanswered`);
  return performance.now();
}
