// Scale-out on etcd (docs/scaling.md): real etcd, three `serve db` nodes, a proxy, writers over several databases.
// Every 200 is on two disks; a primary killed with -9 or paused loses nothing acknowledged and leaves no version gap.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { request } from 'undici';
import { proxyToken } from '../src/db/remote.ts';
import { moveDatabase } from '../src/cluster/move.ts';
import { PLACEMENT } from '../src/cluster/placement.ts';
import { eventIds, clusterForSuite, type TestCluster } from './helpers/cluster.ts';
import { assertAllAcknowledgedKept, createTables, ORG, REPO, startWriters } from './helpers/cluster-writers.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('cluster: synchronous follower and failover', () => {
  let cluster: TestCluster;
  clusterForSuite({ nodes: 3, ttlS: 2 }, (c) => (cluster = c));

  const db = (op: string, body: unknown) => cluster.proxy.db(REPO, op, body);

  test('a new database gets a primary and another node as follower; each 200 is already in the follower\'s copy', async () => {
    await createTables(cluster, ['one']);
    const p = (await cluster.placement(ORG, REPO, 'one'))!;
    assert.ok(p.follower !== null && p.follower !== p.primary, JSON.stringify(p));
    for (let i = 0; i < 5; i++) {
      const res = await db('execute', { database: 'one', statements: [{ sql: 'INSERT INTO t (writer, seq) VALUES (0, ?)', params: [i] }] });
      assert.equal(res.status, 200, res.text);
      const onFollower = eventIds(cluster.node(p.follower!), ORG, REPO, 'one');
      const onPrimary = eventIds(cluster.node(p.primary), ORG, REPO, 'one');
      assert.equal(onFollower.get(res.json.version), onPrimary.get(res.json.version), `version ${res.json.version} on the follower with the same event id`);
    }
    const tooLate = await db('query', { database: 'one', statements: [{ sql: 'SELECT count(*) FROM t' }] });
    assert.deepEqual(tooLate.json.results[0].rows, [[5]]);
  });

  test('an interactive transaction (libSQL protocol): its COMMIT is answered once the follower holds it', async () => {
    await createTables(cluster, ['tx']);
    const p = (await cluster.placement(ORG, REPO, 'tx'))!;
    const auth = { authorization: `Bearer ${cluster.proxy.secret(ORG, REPO)}` };
    const step = async (baton: string | null, sql: string) => {
      const r = await cluster.proxy.call(`/${REPO}/_db/tx/v2/pipeline`, { body: { baton, requests: [{ type: 'execute', stmt: { sql } }] }, headers: auth });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.results[0].type, 'ok', r.text);
      return r.json.baton as string;
    };
    let baton = await step(null, 'BEGIN');
    baton = await step(baton, 'INSERT INTO t (writer, seq) VALUES (7, 1)');
    baton = await step(baton, 'INSERT INTO t (writer, seq) VALUES (7, 2)');
    await step(baton, 'COMMIT');
    const version = (await db('status', { database: 'tx' })).json.version;
    assert.ok(eventIds(cluster.node(p.follower!), ORG, REPO, 'tx').has(version), `version ${version} is on the follower when COMMIT answers`);
  });

  test('a libSQL read of a database that does not exist claims no placement, as /_db/query does; its first write claims it', async () => {
    const auth = { authorization: `Bearer ${cluster.proxy.secret(ORG, REPO)}` };
    const pipeline = (requests: unknown[]) => cluster.proxy.call(`/${REPO}/_db/unplaced/v2/pipeline`, { body: { baton: null, requests: [...requests, { type: 'close' }] }, headers: auth });
    const file = (node: { dataDir: string }) => existsSync(join(node.dataDir, 'db', ORG, REPO, 'unplaced.sqlite'));
    const reads = await pipeline([
      { type: 'execute', stmt: { sql: 'SELECT 1 AS one' } },
      { type: 'execute', stmt: { sql: 'PRAGMA user_version' } },
      { type: 'describe', sql: 'SELECT 1' },
      { type: 'batch', batch: { steps: [{ stmt: { sql: 'SELECT 2' } }, { stmt: { sql: "SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE '\\_%' ESCAPE '\\'" } }] } },
      { type: 'sequence', sql: 'SELECT 1; SELECT 2' },
    ]);
    assert.equal(reads.status, 200, reads.text);
    assert.deepEqual(reads.json.results.map((r: { type: string }) => r.type), ['ok', 'ok', 'ok', 'ok', 'ok', 'ok'], reads.text);
    assert.deepEqual(reads.json.results[0].response.result.rows, [[{ type: 'integer', value: '1' }]], 'as an empty database');
    assert.equal((await db('query', { database: 'unplaced', sql: 'SELECT 1' })).status, 404);
    assert.equal(await cluster.placement(ORG, REPO, 'unplaced'), null, 'no node claimed it');
    assert.ok(!cluster.nodes.some(file), 'no node made it');
    const write = await pipeline([{ type: 'execute', stmt: { sql: 'CREATE TABLE t(x)' } }]);
    assert.equal(write.json.results[0].type, 'ok', write.text);
    const p = await cluster.placement(ORG, REPO, 'unplaced');
    assert.ok(p !== null && p.follower !== null && p.follower !== p.primary, `the first write placed it: ${JSON.stringify(p)}`);
    assert.ok(file(cluster.node(p.primary)), 'on its primary');
    assert.equal((await db('status', { database: 'unplaced' })).json.version, 1);
  });

  test('kill -9 of a primary under writers: every 200 is on the new primary with its event id, no gap, writes resume within TTL + 1 s', async () => {
    const databases = Array.from({ length: 5 }, (_, i) => `k${i}`);
    await createTables(cluster, databases);
    const victim = cluster.node((await cluster.placement(ORG, REPO, 'k0'))!.primary);
    const writers = startWriters(cluster, databases, 10);
    await sleep(1000);
    const killedAt = performance.now();
    const ackedBeforeKill = writers.acked.length;
    cluster.kill(victim);
    try {
      await sleep(cluster.ttlS * 1000 + 2500);
      await writers.stop();
    } finally {
      await cluster.start(victim); // back for the next tests, with its stale copies
    }
    assert.ok(ackedBeforeKill > 20, `writes went through before the kill (${ackedBeforeKill})`);
    await assertAllAcknowledgedKept(cluster, databases, writers.acked);
    for (const database of databases) {
      const p = (await cluster.placement(ORG, REPO, database))!;
      assert.notEqual(p.primary, victim.id, `${database} has a live primary`);
      const ids = eventIds(cluster.node(p.primary), ORG, REPO, database);
      const victimIds = eventIds(victim, ORG, REPO, database);
      for (const a of writers.acked.filter((x) => x.database === database && x.at < killedAt && victimIds.has(x.version))) {
        assert.equal(ids.get(a.version), victimIds.get(a.version), `${database}: version ${a.version} has the same event id`);
      }
      const resumed = writers.acked.find((a) => a.database === database && a.at > killedAt);
      assert.ok(resumed, `${database}: writes resumed`);
      if (victimIds.size > 0) process.stderr.write(`${database}: first 200 after the kill at +${Math.round(resumed.at - killedAt)} ms\n`);
    }
    const k0 = writers.acked.find((a) => a.database === 'k0' && a.at > killedAt)!;
    // The target is TTL + 1 s (bench:cluster measures it: 2.27 s at TTL 2 s on a quiet machine); beside other suites on
    // two cores the nodes' timers run late, so the test allows 2 s more and still fails a failover that waits for anything else.
    assert.ok(k0.at - killedAt <= cluster.ttlS * 1000 + 3000, `writes to k0 resumed ${Math.round(k0.at - killedAt)} ms after the kill (lease TTL ${cluster.ttlS} s + 3 s under test load)`);
  });

  test('SIGSTOP of a primary for 2 × TTL, then SIGCONT: no 200 from the old epoch is lost; the old node rejoins with a new lease', async () => {
    const databases = Array.from({ length: 4 }, (_, i) => `s${i}`);
    await createTables(cluster, databases);
    const victim = cluster.node((await cluster.placement(ORG, REPO, 's0'))!.primary);
    const writers = startWriters(cluster, databases, 8);
    await sleep(800);
    process.kill(-victim.proc!.child.pid!, 'SIGSTOP');
    await sleep(cluster.ttlS * 2000);
    process.kill(-victim.proc!.child.pid!, 'SIGCONT');
    await sleep(2000);
    await writers.stop();
    await assertAllAcknowledgedKept(cluster, databases, writers.acked);
    const p = (await cluster.placement(ORG, REPO, 's0'))!;
    assert.notEqual(p.primary, victim.id, 's0 moved to its follower');
    assert.ok(writers.refused > 0, 'writes racing the pause were refused (503), not answered from the old epoch');
    assert.equal((await cluster.client.prefix(`/scopebase/nodes/${victim.id}`)).kvs.length, 1, 'the paused node registered again');
  });

  test('SIGSTOP of a follower (strict): no 200 without a follower\'s ack; the primary takes another follower and goes on', async () => {
    const databases = ['f0'];
    await createTables(cluster, databases);
    const before = (await cluster.placement(ORG, REPO, 'f0'))!;
    const paused = cluster.node(before.follower!);
    const writers = startWriters(cluster, databases, 4);
    await sleep(500);
    const pausedAt = performance.now();
    process.kill(-paused.proc!.child.pid!, 'SIGSTOP');
    try {
      await sleep(cluster.ttlS * 1000 + 2500);
    } finally {
      process.kill(-paused.proc!.child.pid!, 'SIGCONT');
    }
    await writers.stop();
    const after = (await cluster.placement(ORG, REPO, 'f0'))!;
    assert.equal(after.primary, before.primary, 'the primary stayed');
    assert.ok(after.follower !== null && after.follower !== paused.id, `another follower was taken (${after.follower})`);
    const onFollower = eventIds(cluster.node(after.follower), ORG, REPO, 'f0');
    const later = writers.acked.filter((a) => a.at > pausedAt);
    assert.ok(later.length > 0, 'writes went on with the new follower');
    for (const a of later) assert.ok(onFollower.has(a.version), `version ${a.version} got a 200 while the old follower was paused: the new one has it`);
    await assertAllAcknowledgedKept(cluster, databases, writers.acked);
    // The new follower was brought in line when it was named: it can take over with everything acknowledged.
    const primary = cluster.node(after.primary);
    cluster.kill(primary);
    try {
      await sleep(cluster.ttlS * 1000 + 1500);
      assert.equal((await cluster.placement(ORG, REPO, 'f0'))!.primary, after.follower, 'the new follower took over');
      await assertAllAcknowledgedKept(cluster, databases, writers.acked);
    } finally {
      await cluster.start(primary);
    }
  });

  test('etcd paused: primaries stop writing at their lease deadline, reads go on, writes resume when etcd is back', async () => {
    const databases = ['e0', 'e1'];
    await createTables(cluster, databases);
    const writers = startWriters(cluster, databases, 4);
    await sleep(500);
    const pausedAt = performance.now();
    cluster.etcd.pause();
    let read;
    try {
      await sleep(cluster.ttlS * 1000 + 500);
      read = await db('query', { database: 'e0', statements: [{ sql: 'SELECT count(*) FROM t' }] });
      await sleep(cluster.ttlS * 1000);
    } finally {
      cluster.etcd.resume();
    }
    const resumedAt = performance.now();
    assert.equal(read.status, 200, `reads go on without etcd: ${read.text}`);
    const deadline = pausedAt + cluster.ttlS * 1000;
    const lateWrites = writers.acked.filter((a) => a.at > deadline && a.at < resumedAt);
    assert.deepEqual(lateWrites, [], 'no write answered 200 past the lease deadline while etcd was away');
    for (let i = 0; i < 100 && !databases.every((d) => writers.acked.some((a) => a.database === d && a.at > resumedAt)); i++) await sleep(100);
    await writers.stop();
    for (const d of databases) assert.ok(writers.acked.some((a) => a.database === d && a.at > resumedAt), `${d}: writes resumed after etcd came back`);
    await assertAllAcknowledgedKept(cluster, databases, writers.acked);
  });

  test('the cluster endpoints: only for nodes, and every bad input gets SPEC 3\'s error shape', async () => {
    await createTables(cluster, ['x0']);
    const p = (await cluster.placement(ORG, REPO, 'x0'))!;
    const follower = cluster.node(p.follower!);
    const token = proxyToken(cluster.proxy.config.rootKeys[0]!);
    const post = async (path: string, body: string | Buffer, headers: Record<string, string> = {}) => {
      const res = await request(`${follower.url}${path}`, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
      return { status: res.statusCode, json: await res.body.json() as { error?: { code: string; message: string } } };
    };
    const q = (epoch: number | string) => `org=${ORG}&repo=${REPO}&database=x0&epoch=${epoch}`;
    const cases: [string, string | Buffer, Record<string, string>, number, RegExp][] = [
      [`/_cluster/apply?${q(p.epoch)}`, '{"events":[]}', {}, 403, /only answer other nodes/],
      [`/_cluster/apply?${q('x')}`, '{"events":[]}', { 'x-scopebase-proxy-token': token }, 400, /epoch must be a positive integer/],
      [`/_cluster/apply?${q(p.epoch)}`, 'not json', { 'x-scopebase-proxy-token': token }, 400, /the body must be a JSON object/],
      [`/_cluster/apply?${q(p.epoch)}`, '{"events":[]}', { 'x-scopebase-proxy-token': token }, 400, /events are a non-empty array/],
      [`/_cluster/apply?${q(p.epoch)}&mirrors=%5B1%5D`, '{"events":[{}]}', { 'x-scopebase-proxy-token': token }, 400, /mirrors must be an object of mirror name → non-negative integer version/],
      [`/_cluster/apply?${q(p.epoch)}&mirrors=${encodeURIComponent('{"a":-1}')}`, '{"events":[{}]}', { 'x-scopebase-proxy-token': token }, 400, /mirrors must be an object/],
      [`/_cluster/cursors?${q(p.epoch)}`, '{}', { 'x-scopebase-proxy-token': token }, 400, /mirrors must be an object/],
      [`/_cluster/cursors?${q(p.epoch)}`, '{"mirrors":{"a":"1"}}', { 'x-scopebase-proxy-token': token }, 400, /mirrors must be an object/],
      [`/_cluster/snapshot?${q(p.epoch)}&mirrors=%7B`, Buffer.from('x'), { 'x-scopebase-proxy-token': token, 'content-type': 'application/vnd.sqlite3' }, 400, /mirrors must be a JSON object/],
      [`/_cluster/confirm?${q(p.epoch)}`, '{"version":"a"}', { 'x-scopebase-proxy-token': token }, 400, /version must be an integer/],
      [`/_cluster/state?${q(1)}`, '{}', { 'x-scopebase-proxy-token': token }, 410, /epoch 1 is older than this database's current one/],
      [`/_cluster/snapshot?${q(p.epoch)}`, Buffer.from('not a database'), { 'x-scopebase-proxy-token': token, 'content-type': 'application/vnd.sqlite3' }, 400, /not a scopebase database/],
      [`/_cluster/snapshot?${q(p.epoch)}`, '{}', { 'x-scopebase-proxy-token': token }, 400, /a snapshot is sent as application\/vnd.sqlite3/],
    ];
    for (const [path, body, headers, status, message] of cases) {
      const res = await post(path, body, headers);
      assert.equal(res.status, status, `${path}: ${JSON.stringify(res.json)}`);
      assert.match(res.json.error!.message, message);
    }
    // A snapshot cut off mid-upload (the sender died or timed out) leaves no part of it in the follower's DATA_DIR/tmp.
    const cut = connect(Number(new URL(follower.url).port), '127.0.0.1');
    cut.on('error', () => {});
    cut.write(`POST /_cluster/snapshot?${q(p.epoch)} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-scopebase-proxy-token: ${token}\r\ncontent-type: application/vnd.sqlite3\r\ncontent-length: ${1 << 20}\r\n\r\n`);
    cut.write(Buffer.alloc(64 * 1024));
    const tmp = join(follower.dataDir, 'tmp');
    const received = () => readdirSync(tmp).filter((f) => f.startsWith('received-'));
    for (let i = 0; i < 100 && received().length === 0; i++) await sleep(20);
    assert.equal(received().length, 1, 'the upload was being received');
    cut.resetAndDestroy();
    for (let i = 0; i < 100 && received().length > 0; i++) await sleep(20);
    assert.deepEqual(received(), [], 'the part received was removed');
    // The refused snapshot left the follower's copy as it was.
    const write = await db('execute', { database: 'x0', statements: [{ sql: 'INSERT INTO t (writer, seq) VALUES (1, 1)' }] });
    assert.equal(write.status, 200, write.text);
    assert.ok(eventIds(follower, ORG, REPO, 'x0').has(write.json.version));
  });

  test('a live move under writers: the target becomes primary, nothing acknowledged is lost, nothing is written twice', async () => {
    await createTables(cluster, ['m0']);
    const before = (await cluster.placement(ORG, REPO, 'm0'))!;
    const to = cluster.nodes.find((n) => n.id !== before.primary && n.id !== before.follower)!.id;
    const writers = startWriters(cluster, ['m0'], 4);
    await sleep(500);
    const lines: string[] = [];
    const { epoch } = await moveDatabase([cluster.etcd.url], { org: ORG, repo: REPO, database: 'm0' }, to, (l) => lines.push(l), 30_000);
    const movedAt = performance.now();
    await sleep(1000);
    await writers.stop();
    const after = (await cluster.placement(ORG, REPO, 'm0'))!;
    assert.deepEqual([after.primary, after.epoch], [to, epoch], lines.join('\n'));
    assert.equal(after.follower, before.primary, 'the old primary follows');
    assert.match(lines.at(-1)!, new RegExp(`^done: ${to} is the primary`));
    assert.ok(writers.acked.some((a) => a.at > movedAt), 'writes go on on the new primary');
    await assertAllAcknowledgedKept(cluster, ['m0'], writers.acked);
    const rows = await db('query', { database: 'm0', statements: [{ sql: 'SELECT count(*), count(DISTINCT writer || \'/\' || seq) FROM t' }] });
    const [total, distinct] = rows.json.results[0].rows[0];
    assert.equal(total, distinct, 'no write applied twice');
    const refusal = await moveDatabase([cluster.etcd.url], { org: ORG, repo: REPO, database: 'm0' }, 'nowhere', () => {}).catch((e: Error) => e.message);
    assert.match(String(refusal), /node nowhere is not alive in this cluster \(live: n1, n2, n3\)/);
  });

  test('new databases go to the live node with the fewest primaries (placement.ts leastLoaded)', async () => {
    await sleep(500); // the proxy's view has caught up with the earlier tests' moves
    const counts = new Map(cluster.nodes.map((n) => [n.id, 0]));
    for (const kv of (await cluster.client.prefix(PLACEMENT)).kvs) {
      const primary = (JSON.parse(kv.value) as { primary: string }).primary;
      if (counts.has(primary)) counts.set(primary, counts.get(primary)! + 1);
    }
    const before = [...counts.values()];
    const n = 3 * Math.max(...before) - before.reduce((a, b) => a + b, 0) + 3;
    for (let i = 0; i < n; i++) {
      const database = `p${i}`;
      await createTables(cluster, [database]);
      const { primary } = (await cluster.placement(ORG, REPO, database))!;
      const least = Math.min(...counts.values());
      assert.equal(counts.get(primary), least, `${database} went to ${primary} (${JSON.stringify([...counts])})`);
      counts.set(primary, counts.get(primary)! + 1);
    }
    const after = [...counts.values()];
    assert.ok(Math.max(...after) - Math.min(...after) <= 1, `primaries are even now: ${JSON.stringify([...counts])} (before: ${JSON.stringify(before)})`);
  });

  test('status lists every database of the repo, whichever node holds it (SPEC 4.7)', async () => {
    const placed = (await cluster.client.prefix(`${PLACEMENT}${ORG}/${REPO}/`)).kvs.map((kv) => kv.key.slice(`${PLACEMENT}${ORG}/${REPO}/`.length)).sort();
    const primaries = new Set((await cluster.client.prefix(PLACEMENT)).kvs.map((kv) => (JSON.parse(kv.value) as { primary: string }).primary));
    assert.ok(primaries.size >= 2, 'premise: the repo\'s databases are on more than one node');
    // The list is the answering node's view of placement: at most one poll (TTL / 20) behind a database just made.
    for (const database of ['main', placed[0]!]) {
      let res = await cluster.proxy.db(REPO, 'status', { database });
      for (let i = 0; i < 50 && res.status === 200 && JSON.stringify(res.json.databases) !== JSON.stringify(placed); i++) {
        await sleep(100);
        res = await cluster.proxy.db(REPO, 'status', { database });
      }
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.json.databases, placed);
    }
  });
});
