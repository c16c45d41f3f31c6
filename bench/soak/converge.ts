// The soak's end checks for mirrors: wait until every mirror acknowledged every database's last version, then
// compare the reference mirror's replicas with the primary row by row (schema and every row of every table, read
// through each side's own /_db/query), and the webhook receiver's acknowledged events with each database's change
// log (every event id, in version order).
import type { JsonAnswer } from '../lib/http.ts';
import type { ReceiverReport } from './receiver.ts';

export interface SoakDb { org: string; repo: string; database: string }
/** POST /{repo}/_db/{op} on the primary, with the repo's secret. */
export type PrimaryCall = (d: SoakDb, op: string, body: Record<string, unknown>) => Promise<JsonAnswer>;
/** POST /{repo}/_db/query on the reference mirror, with the repo's secret. */
export type MirrorQuery = (d: SoakDb, body: Record<string, unknown>) => Promise<JsonAnswer>;

const key = (d: SoakDb) => `${d.org}/${d.repo}/${d.database}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function eachLimited<T>(items: T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) await work(items[next++]!);
  }));
}

/** Retries a 503 (documented shedding) a few times; anything else is returned as is. */
async function patient(send: () => Promise<JsonAnswer>): Promise<JsonAnswer> {
  let r = await send();
  for (let i = 0; i < 20 && (r.status === 503 || r.status === 429); i++) {
    await sleep(250);
    r = await send();
  }
  return r;
}

/** Polls /_db/status until every mirror's delivered version is the database's version; returns the versions. */
export async function drain(dbs: SoakDb[], primary: PrimaryCall, mirrors: string[], timeoutMs: number): Promise<{ versions: Map<SoakDb, number>; ms: number; stuck: string[] }> {
  const t0 = performance.now();
  const versions = new Map<SoakDb, number>();
  let waiting = dbs;
  let last = new Map<SoakDb, string>();
  while (waiting.length && performance.now() - t0 < timeoutMs) {
    const still: SoakDb[] = [];
    last = new Map();
    await eachLimited(waiting, 8, async (d) => {
      const r = await patient(() => primary(d, 'status', {}));
      const states = (r.json?.mirrors ?? []) as { name: string; deliveredVersion: number; lastError: string | null }[];
      const behind = mirrors.filter((m) => states.find((s) => s.name === m)?.deliveredVersion !== r.json?.version);
      if (r.status === 200 && behind.length === 0) versions.set(d, r.json.version);
      else {
        still.push(d);
        last.set(d, `${r.status} at ${r.json?.version}: ${JSON.stringify(states)}`);
      }
    });
    waiting = still;
    if (waiting.length) await sleep(500);
  }
  return { versions, ms: performance.now() - t0, stuck: waiting.map((d) => `${key(d)} not drained: ${last.get(d)}`) };
}

const sortedRows = (rows: unknown[][]) => rows.map((r) => JSON.stringify(r)).sort();
const SCHEMA_SQL = "SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT LIKE '\\_scopebase%' ESCAPE '\\' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name";

/** Reads every table of every database from the primary and from the reference mirror (at the same version); compares. */
export async function compareReplicas(versions: Map<SoakDb, number>, primary: PrimaryCall, mirror: MirrorQuery): Promise<{ tables: number; rows: number; mismatches: string[] }> {
  let [tables, rows] = [0, 0];
  const mismatches: string[] = [];
  await eachLimited([...versions.keys()], 8, async (d) => {
    const version = versions.get(d)!;
    const status = await patient(() => primary(d, 'status', {}));
    if (status.json?.version !== version) {
      mismatches.push(`${key(d)}: the primary moved from version ${version} to ${status.json?.version} after the load stopped`);
      return;
    }
    const names = ((status.json?.tables ?? []) as { name: string }[]).map((t) => t.name);
    const statements = [{ sql: SCHEMA_SQL }, ...names.map((n) => ({ sql: `SELECT * FROM "${n.replaceAll('"', '""')}"` }))];
    const [a, b] = await Promise.all([patient(() => primary(d, 'query', { statements })), patient(() => mirror(d, { statements, minVersion: version }))]);
    if (a.status !== 200 || b.status !== 200) {
      mismatches.push(`${key(d)}: read primary ${a.status}, reference mirror ${b.status} ${JSON.stringify(b.json).slice(0, 200)}`);
      return;
    }
    const results = (x: JsonAnswer) => (x.json.results as { rows: unknown[][] }[]).map((r) => sortedRows(r.rows));
    const [pa, pb] = [results(a), results(b)];
    ['schema', ...names].forEach((name, i) => {
      const [ra, rb] = [pa[i]!, pb[i]!];
      if (i > 0) {
        tables++;
        rows += ra.length;
      }
      const onlyA = ra.filter((r) => !rb.includes(r));
      const onlyB = rb.filter((r) => !ra.includes(r));
      if (ra.length !== rb.length || onlyA.length || onlyB.length) {
        mismatches.push(`${key(d)} ${name} at version ${version}: primary ${ra.length} rows, replica ${rb.length}; only on the primary ${onlyA.slice(0, 2).join(' ')}; only on the replica ${onlyB.slice(0, 2).join(' ')}`);
      }
    });
  });
  return { tables, rows, mismatches };
}

/** Every event id of each database's change log, in version order, must be what the receiver acknowledged first. */
export async function checkReceiver(versions: Map<SoakDb, number>, primary: PrimaryCall, report: ReceiverReport): Promise<{ events: number; redelivered: number; mismatches: string[] }> {
  let [events, redelivered] = [0, 0];
  const mismatches: string[] = [...report.invalid.map((s) => `receiver refused a signature: ${s}`)];
  await eachLimited([...versions.keys()], 8, async (d) => {
    const log: [string, number][] = [];
    for (let since = 0; ;) {
      const r = await patient(() => primary(d, 'changes', { since, limit: 1000 }));
      if (r.status !== 200) {
        mismatches.push(`${key(d)}: /_db/changes since ${since} answered ${r.status} ${JSON.stringify(r.json).slice(0, 200)}`);
        return;
      }
      const page = r.json.events as { id: string; version: number }[];
      for (const e of page) log.push([e.id, e.version]);
      if (page.length === 0 || page.at(-1)!.version >= r.json.version) break;
      since = page.at(-1)!.version;
    }
    const got = report.events[key(d)] ?? [];
    const seen = new Set<string>();
    const firsts = got.filter(([id]) => !seen.has(id) && seen.add(id));
    redelivered += got.length - firsts.length;
    events += log.length;
    const at = log.findIndex(([id], i) => firsts[i]?.[0] !== id);
    if (at !== -1 || firsts.length !== log.length) {
      const i = at === -1 ? log.length : at;
      mismatches.push(`${key(d)}: the receiver's events differ from the change log at position ${i} (log ${JSON.stringify(log[i] ?? null)}, received ${JSON.stringify(firsts[i] ?? null)}; ${firsts.length} received, ${log.length} in the log)`);
    }
    // In order: a re-delivery may repeat an earlier event, but nothing newer may come before an older one is acknowledged.
    let high = 0;
    for (const [, v] of got) {
      if (v > high + 1) {
        mismatches.push(`${key(d)}: version ${v} was acknowledged before version ${high + 1}`);
        break;
      }
      high = Math.max(high, v);
    }
  });
  return { events, redelivered, mismatches };
}
