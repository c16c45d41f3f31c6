// A tenant's expressions on a follower (attack round, 2026-11-26): applying the primary's changesets runs the
// tenant's CHECK constraints, generated columns and index expressions. A tenant that writes rows whose CHECK costs
// most of the statement time limit must not stall the follower node: another org's reads on that node stay quick,
// the node keeps its lease (no failover of the other org's database), and the tenant's own writes still reach the
// follower (applied in an executor under a time limit, or shipped as a snapshot when that limit is passed).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { NODES } from '../src/cluster/placement.ts';
import { eventIds, clusterForSuite, type TestCluster } from './helpers/cluster.ts';
import type { HttpResult } from './helpers/product.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const ORG = 'acme';
const REPO = 'web';
const VICTIM = 'victim';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Rows per attacking write; each row's CHECK builds and rewrites strings of ~200 KB to ~600 KB (≈ 3 ms here, ≈ 0.8 s a write). */
const ROWS = 250;
const ATTACK_MS = 8000;

describe('cluster: a tenant\'s expressions do not stall its follower node', () => {
  let cluster: TestCluster;
  clusterForSuite({
      nodes: 2, ttlS: 2,
      // Two executors per repo of three: the attacker's work on a node leaves one to other repos. The primary's limit
      // leaves room for two writes grouped on a busy machine; a follower's apply gets half the lease TTL (1 s) here.
      env: { DB_EXECUTORS: '3', DB_EXECUTORS_PER_REPO: '2', DB_QUERY_TIMEOUT_MS: '6000'},
    }, (c) => (cluster = c));

  const victimRead = async (): Promise<{ ms: number; res: HttpResult }> => {
    const at = performance.now();
    const res = await cluster.proxy.db('app', 'query', { sql: 'SELECT k FROM notes' }, { org: VICTIM });
    return { ms: performance.now() - at, res };
  };
  /** Executor processes the node replaced (each stopped apply kills one), from its admin port's /metrics. */
  const restarts = async (id: string): Promise<number> => {
    const admin = /\(admin (http:\/\/[^)]+)\)/.exec(cluster.node(id).proc!.stdout() + cluster.node(id).proc!.stderr())![1]!;
    const text = await (await fetch(`${admin}/metrics`)).text();
    return Number(/^scopebase_db_executor_restarts_total (\d+)/m.exec(text)?.[1] ?? 0);
  };
  const nodeKey = async (id: string) => (await cluster.client.prefix(`${NODES}${id}`)).kvs.find((kv) => kv.key === `${NODES}${id}`);

  test('an expensive CHECK on every row: another org\'s reads on the follower node stay quick, its lease holds, nothing is lost', async () => {
    for (const sql of ['CREATE TABLE notes(k)', "INSERT INTO notes VALUES ('kept')"]) {
      const r = await cluster.proxy.db('app', 'execute', { sql }, { org: VICTIM });
      assert.equal(r.status, 200, r.text);
    }
    const victim = (await cluster.placement(VICTIM, 'app', 'main'))!;
    const migrate = await cluster.proxy.db(REPO, 'migrate', { database: 'heavy', migrations: [{ id: '1', sql: `
      CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL CHECK (length(replace(replace(hex(zeroblob(100000 + v % 2)), '0', 'ab'), 'a', 'cd')) > 0));
      CREATE TABLE log (id INTEGER PRIMARY KEY, note TEXT);` }] });
    assert.equal(migrate.status, 200, migrate.text);
    const heavy = (await cluster.placement(ORG, REPO, 'heavy'))!;
    // Two nodes: the new database goes to the node with fewer primaries, so its follower is the victim's primary.
    assert.equal(heavy.follower, victim.primary, 'the attacked follower node serves the victim\'s database');
    const leaseBefore = (await nodeKey(victim.primary))!;
    const restartsBefore = await restarts(victim.primary);

    // The same read without the attack.
    const baseline: number[] = [];
    for (let i = 0; i < 30; i++) {
      const { ms, res } = await victimRead();
      assert.equal(res.status, 200, res.text);
      baseline.push(ms);
      await sleep(20);
    }

    let stop = false;
    const acked: number[] = [];
    let refused = 0;
    let lastRefusal = '';
    let timedOut = 0;
    const unexpected: string[] = [];
    const attacker = async () => {
      while (!stop) {
        const res = await cluster.proxy.db(REPO, 'execute', { database: 'heavy', statements: [
          { sql: `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ${ROWS}) INSERT INTO t (v) SELECT i FROM c` },
        ] });
        if (res.status === 200) acked.push(res.json.version as number);
        else if (res.status === 422 && res.json?.error?.code === 'query_timeout') timedOut++; // two writes grouped past the limit on a busy machine
        else {
          refused++;
          lastRefusal = res.text.slice(0, 300);
          if (res.status !== 503 || !res.headers['retry-after']) unexpected.push(`${res.status} ${res.text.slice(0, 300)}`);
          await sleep(50);
        }
      }
    };
    const attackers = [attacker(), attacker()];
    await sleep(500); // the first writes reach the follower
    const during: number[] = [];
    const statuses: number[] = [];
    for (const end = performance.now() + ATTACK_MS; performance.now() < end;) {
      const { ms, res } = await victimRead();
      during.push(ms);
      statuses.push(res.status);
      await sleep(20);
    }
    stop = true;
    await Promise.all(attackers);

    const max = (xs: number[]) => Math.max(...xs);
    const report = `baseline max ${max(baseline).toFixed(0)} ms; under attack max ${max(during).toFixed(0)} ms over ${during.length} reads; attacker: ${acked.length} acknowledged, ${timedOut} past the time limit, ${refused} refused ${lastRefusal}`;
    process.stderr.write(`${report}\n`);
    assert.deepEqual(unexpected, [], 'the attacker gets 200, 503 with Retry-After, or 422 query_timeout');
    assert.ok(acked.length >= 2, `the attacker's writes go on (${report})`);
    assert.deepEqual(statuses.filter((s) => s !== 200), [], `every read of the other org answered 200 (${report})`);
    // Without the fix one apply holds the node's event loop for seconds (≈ 1.3 s an event, two events a shipment).
    assert.ok(max(during) < max(baseline) + 750, `the other org's reads on the follower node stay quick (${report})`);

    // A stopped apply costs the follower an executor; after one, the primary ships snapshots for a while (10 s
    // first) instead of having each of the attacker's shipments stopped.
    const stopped = (await restarts(victim.primary)) - restartsBefore;
    process.stderr.write(`executors replaced on the follower node: ${stopped}\n`);
    assert.ok(stopped <= 2, `${stopped} executors replaced on the follower node: repeated stops do not loop (${report})`);

    // The follower node kept its lease, so the other org's database did not fail over.
    const leaseAfter = (await nodeKey(victim.primary))!;
    assert.equal(leaseAfter.lease, leaseBefore.lease, 'the follower node kept its lease');
    assert.deepEqual(await cluster.placement(VICTIM, 'app', 'main'), victim, 'the other org\'s database stayed where it was');
    assert.deepEqual(await cluster.placement(ORG, REPO, 'heavy'), heavy, 'the attacker\'s database stayed where it was');

    // Nothing of the tenant's is lost: one more write ships whatever a refused one left behind, then the follower's
    // copy holds the primary's history event for event, and every acknowledged write.
    for (let i = 0; ; i++) {
      const last = await cluster.proxy.db(REPO, 'execute', { database: 'heavy', sql: "INSERT INTO log (note) VALUES ('done')" });
      if (last.status === 200) break;
      assert.ok(last.status === 503 && i < 20, last.text);
      await sleep(200);
    }
    const onPrimary = eventIds(cluster.node(heavy.primary), ORG, REPO, 'heavy');
    const onFollower = eventIds(cluster.node(heavy.follower!), ORG, REPO, 'heavy');
    assert.deepEqual([...onFollower], [...onPrimary], 'the follower holds every event the primary does');
    for (const v of acked) assert.ok(onFollower.has(v), `version ${v} got a 200 and is on the follower`);
    const copy = openSqlite(join(cluster.node(heavy.follower!).dataDir, 'db', ORG, REPO, 'heavy.sqlite'), { readOnly: true });
    try {
      const rows = Number((copy.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n);
      assert.ok(rows >= acked.length * ROWS, `the follower's copy has every acknowledged row (${rows} for ${acked.length} writes)`);
    } finally {
      copy.close();
    }
  });
});
