// Writers for cluster tests: each inserts (writer, seq) rows into its database through the proxy and records every
// 200; the check reads each database's current primary and demands every acknowledged write, with no version gap.
import assert from 'node:assert/strict';
import { eventIds, type TestCluster } from './cluster.ts';

export const ORG = 'acme';
export const REPO = 'web';

export interface Ack { database: string; version: number; writer: number; seq: number; at: number }

export interface Writers {
  acked: Ack[];
  /** 503 answers (each with Retry-After); any other non-200 fails the test. */
  refused: number;
  stop(): Promise<void>;
}

export async function createTables(cluster: TestCluster, databases: string[]): Promise<void> {
  for (const database of databases) {
    const res = await cluster.proxy.db(REPO, 'migrate', { database, migrations: [{ id: '0001', sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY, writer INTEGER, seq INTEGER)' }] });
    assert.equal(res.status, 200, res.text);
  }
}

/** `count` writers numbered from `first`, writer w on database w mod n; through `cluster.proxy` unless `proxy` is given. */
export function startWriters(cluster: TestCluster, databases: string[], count: number, { first = 0, proxy = cluster.proxy }: { first?: number; proxy?: TestCluster['proxy'] } = {}): Writers {
  let stopped = false;
  const state: Writers = { acked: [], refused: 0, stop: async () => {} };
  const one = async (w: number) => {
    const database = databases[w % databases.length]!;
    for (let seq = 0; !stopped; seq++) {
      const res = await proxy.db(REPO, 'execute', { database, statements: [{ sql: 'INSERT INTO t (writer, seq) VALUES (?, ?)', params: [w, seq] }] });
      if (res.status === 200) state.acked.push({ database, version: res.json.version, writer: w, seq, at: performance.now() });
      else {
        assert.equal(res.status, 503, res.text); // racing a failover: refused, never a wrong answer
        assert.ok(res.headers['retry-after'], 'a 503 says when to retry');
        state.refused++;
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };
  const running = Array.from({ length: count }, (_, i) => one(first + i));
  state.stop = async () => {
    stopped = true;
    await Promise.all(running);
  };
  return state;
}

/** Every 200 is on the database's current primary (row and version), versions run 1..n with no gap. */
export async function assertAllAcknowledgedKept(cluster: TestCluster, databases: string[], acked: Ack[]): Promise<void> {
  for (const database of databases) {
    const p = (await cluster.placement(ORG, REPO, database))!;
    const ids = eventIds(cluster.node(p.primary), ORG, REPO, database);
    const versions = [...ids.keys()];
    assert.deepEqual(versions, Array.from({ length: versions.length }, (_, i) => i + 1), `${database}: no version gap`);
    const mine = acked.filter((a) => a.database === database);
    for (const a of mine) assert.ok(ids.has(a.version), `${database}: version ${a.version} got a 200 and is on the primary`);
    const rows = await readAllRows(cluster, database);
    assert.equal(rows.status, 200, rows.text);
    const have = new Set((rows.json.results[0].rows as [number, number][]).map(([w, q]) => `${w}/${q}`));
    for (const a of mine) assert.ok(have.has(`${a.writer}/${a.seq}`), `${database}: row ${a.writer}/${a.seq} got a 200 and is there`);
  }
}

/**
 * The read a client would make after a failover: a 503 with Retry-After (a node whose view of the new term is a moment
 * behind) is retried as it says, for up to 10 s; any other answer, or a 503 past that, is the test's to judge.
 */
async function readAllRows(cluster: TestCluster, database: string) {
  const until = performance.now() + 10_000;
  for (;;) {
    const res = await cluster.proxy.db(REPO, 'query', { database, statements: [{ sql: 'SELECT writer, seq FROM t' }] });
    if (res.status !== 503 || !res.headers['retry-after'] || performance.now() > until) return res;
    await new Promise((r) => setTimeout(r, 250));
  }
}
