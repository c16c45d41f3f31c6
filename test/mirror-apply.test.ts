// A tenant's expressions on the reference mirror (attack round, 2026-11-26): applying a changeset runs the tenant's
// CHECK constraints, generated columns and index expressions. The reference mirror serves every org's replicas from
// one process: a tenant writing rows whose CHECK costs most of the statement time limit must not hold that process's
// event loop, so another org's mirror reads and hooks stay quick; the tenant's replica still converges (applied in an
// executor under the time limit, or re-bootstrapped from a snapshot when that limit stops it, with backoff).
// The product and the reference mirror run as their own processes (`scopebase start`, `scopebase serve mirror`).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { call, ROOT_KEY, spawnProduct, tempDir, testEnv, type HttpResult, type SpawnedProduct } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { newSecret } from './helpers/mirror.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const BASE = 'localhost';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Rows per attacking write; each row's CHECK builds and rewrites strings of ~200 KB to ~600 KB (≈ 4 ms here, ≈ 1.2 s a write). */
const ROWS = 250;
const ATTACK_MS = 8000;
const HEAVY_SCHEMA = `
  CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL CHECK (length(replace(replace(hex(zeroblob(100000 + v % 2)), '0', 'ab'), 'a', 'cd')) > 0));
  CREATE TABLE log (id INTEGER PRIMARY KEY, note TEXT);`;
const ATTACK_SQL = `WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ${ROWS}) INSERT INTO t (v) SELECT i FROM c`;

interface Pair {
  product: SpawnedProduct;
  mirror: SpawnedProduct;
  /** POST /{repo}/_db/{op} on the product. */
  db(org: string, repo: string, op: string, body: unknown): Promise<HttpResult>;
  /** POST /{repo}/_db/query on the reference mirror. */
  mirrorQuery(org: string, repo: string, body: unknown): Promise<HttpResult>;
  /** The reference mirror's log lines (JSON), those with this message. */
  logs(msg: string): Record<string, unknown>[];
  close(): Promise<void>;
}

/** The product and the reference mirror as two processes: the product delivers to the mirror, which heals from it. */
async function startPair(mirrorEnv: Record<string, string> = {}): Promise<Pair> {
  const secret = newSecret();
  const mirrorPort = await freePort();
  const productDir = tempDir();
  const mirrorDir = tempDir();
  // Three executors, two a repo: the attacker's writes on the primary leave one to other repos.
  const product = await spawnProduct(testEnv(productDir, {
    DB_EXECUTORS: '3', DB_EXECUTORS_PER_REPO: '2', DB_QUERY_TIMEOUT_MS: '6000', DB_MIRROR_MAX_BACKOFF_MS: '200',
    DB_MIRRORS: JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${mirrorPort}/hook`, secret }]),
  }));
  let mirror: SpawnedProduct;
  try {
    mirror = await spawnProduct(testEnv(mirrorDir, {
      MIRROR_PORT: String(mirrorPort), MIRROR_SECRET: secret, MIRROR_SOURCE_URL: product.url, DB_QUERY_TIMEOUT_MS: '6000', LOG_LEVEL: 'info', ...mirrorEnv,
    }), ['serve', 'mirror']);
  } catch (e) {
    product.killAll();
    throw e;
  }
  const rootKey = Buffer.from(ROOT_KEY, 'hex');
  const auth = (org: string, repo: string) => ({ authorization: `Bearer ${repoSecret(rootKey, org, repo)}` });
  return {
    product, mirror,
    db: (org, repo, op, body) => call(product.url, BASE, `/${repo}/_db/${op}`, { org, body, headers: auth(org, repo) }),
    mirrorQuery: (org, repo, body) => call(mirror.url, BASE, `/${repo}/_db/query`, { org, body, headers: auth(org, repo) }),
    logs: (msg) => mirror.stdout().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === msg),
    async close() {
      if (process.env.TEST_MIRROR_LOG) process.stderr.write(`--- mirror\n${mirror.stdout()}${mirror.stderr()}\n--- product\n${product.stdout()}${product.stderr()}\n`);
      for (const p of [mirror, product]) {
        try {
          p.killAll();
        } catch { /* already gone */ }
      }
      await sleep(100);
      rmSync(productDir, { recursive: true, force: true });
      rmSync(mirrorDir, { recursive: true, force: true });
    },
  };
}

const ok = (res: HttpResult, what: string): HttpResult => {
  assert.equal(res.status, 200, `${what}: ${res.text}`);
  return res;
};
const max = (xs: number[]) => Math.max(...xs);

/**
 * The attack, and meanwhile the victim org's traffic on the mirror: plain reads every 20 ms (served by the mirror's
 * executors) and, every 500 ms, a write on the product read back from the mirror with minVersion (its hook, then a
 * read). Returns the latencies, before (baseline) and during the attack.
 */
async function attackAndMeasure(pair: Pair): Promise<{ baseline: number[]; during: number[]; hookBaseline: number[]; hookDuring: number[]; statuses: number[]; acked: number[]; report: string }> {
  const read = async () => {
    const at = performance.now();
    const res = await pair.mirrorQuery('victim', 'app', { sql: 'SELECT count(*) FROM notes' });
    return { ms: performance.now() - at, res };
  };
  /** A victim write, then the mirror's read of it: how long until the mirror applied the hook and answered. */
  const roundTrip = async () => {
    const w = ok(await pair.db('victim', 'app', 'execute', { sql: "INSERT INTO notes (k) VALUES ('more')" }), 'victim write');
    const at = performance.now();
    const res = await pair.mirrorQuery('victim', 'app', { sql: 'SELECT count(*) FROM notes', minVersion: w.json.version });
    return { ms: performance.now() - at, res };
  };
  const baseline: number[] = [];
  const hookBaseline: number[] = [];
  for (let i = 0; i < 30; i++) {
    const { ms, res } = await read();
    ok(res, 'baseline read');
    baseline.push(ms);
    if (i % 5 === 0) {
      const hook = await roundTrip();
      ok(hook.res, 'baseline round trip');
      hookBaseline.push(hook.ms);
    }
    await sleep(20);
  }

  let stop = false;
  const acked: number[] = [];
  const unexpected: string[] = [];
  const attacker = (async () => {
    while (!stop) {
      const res = await pair.db('acme', 'web', 'execute', { database: 'heavy', sql: ATTACK_SQL });
      if (res.status === 200) acked.push(res.json.version as number);
      else {
        unexpected.push(`${res.status} ${res.text.slice(0, 200)}`);
        await sleep(50);
      }
    }
  })();
  await sleep(1500); // the first attacking events reach the mirror
  const during: number[] = [];
  const hookDuring: number[] = [];
  const statuses: number[] = [];
  let nextRoundTrip = 0;
  for (const end = performance.now() + ATTACK_MS; performance.now() < end;) {
    const { ms, res } = await read();
    during.push(ms);
    statuses.push(res.status);
    if (performance.now() >= nextRoundTrip) {
      const hook = await roundTrip();
      hookDuring.push(hook.ms);
      statuses.push(hook.res.status);
      nextRoundTrip = performance.now() + 500;
    }
    await sleep(20);
  }
  stop = true;
  await attacker;
  assert.deepEqual(unexpected, [], 'every attacking write is accepted by the primary');
  const report = `reads: baseline max ${max(baseline).toFixed(0)} ms, under attack max ${max(during).toFixed(0)} ms over ${during.length}; ` +
    `write→mirror: baseline max ${max(hookBaseline).toFixed(0)} ms, under attack max ${max(hookDuring).toFixed(0)} ms over ${hookDuring.length}; ` +
    `attacker: ${acked.length} writes of ${ROWS} rows`;
  process.stderr.write(`${report}\n`);
  return { baseline, during, hookBaseline, hookDuring, statuses, acked, report };
}

/** The tenant's replica ends equal to the primary, row by row (one more write first: its hook carries the last version). */
/** The attack runs: the attacker's writes go on, and the other org's reads and hooks answer, as quick as before. Returns the acknowledged writes. */
async function attackOthersUnharmed(pair: Pair): Promise<number[]> {
  const { baseline, during, hookBaseline, hookDuring, statuses, acked, report } = await attackAndMeasure(pair);
  assert.ok(acked.length >= 3, `the attacker's writes go on (${report})`);
  assert.deepEqual(statuses.filter((s) => s !== 200), [], `every read of the other org answered 200 (${report})`);
  assert.ok(max(during) < max(baseline) + 500, `the other org's mirror reads stay quick (${report})`);
  assert.ok(max(hookDuring) < max(hookBaseline) + 1000, `the other org's hooks stay quick (${report})`);
  return acked;
}

async function assertConverges(pair: Pair): Promise<number> {
  const last = ok(await pair.db('acme', 'web', 'execute', { database: 'heavy', sql: "INSERT INTO log (note) VALUES ('done')" }), 'last write');
  const sql = [{ sql: 'SELECT id, v FROM t ORDER BY id' }, { sql: 'SELECT id, note FROM log ORDER BY id' }];
  const onPrimary = ok(await pair.db('acme', 'web', 'query', { database: 'heavy', statements: sql }), 'primary read');
  let onMirror: HttpResult | undefined;
  // A replica that heals from a snapshot may answer 503 for a moment (the sender retries): wait for the last version.
  for (let i = 0; i < 12; i++) {
    onMirror = await pair.mirrorQuery('acme', 'web', { database: 'heavy', statements: sql, minVersion: last.json.version });
    if (onMirror.status === 200) break;
  }
  ok(onMirror!, 'mirror read at the last version');
  assert.equal(onMirror!.json.version, last.json.version);
  assert.deepEqual(onMirror!.json.results, onPrimary.json.results, 'the replica holds the primary\'s rows exactly');
  return (onPrimary.json.results[0].rows as unknown[]).length;
}

async function setUp(pair: Pair): Promise<void> {
  ok(await pair.db('victim', 'app', 'execute', { sql: 'CREATE TABLE notes(id INTEGER PRIMARY KEY, k)' }), 'victim table');
  const first = ok(await pair.db('victim', 'app', 'execute', { sql: "INSERT INTO notes (k) VALUES ('kept')" }), 'victim row');
  ok(await pair.mirrorQuery('victim', 'app', { sql: 'SELECT 1', minVersion: first.json.version }), 'victim replica');
  const migrated = ok(await pair.db('acme', 'web', 'migrate', { database: 'heavy', migrations: [{ id: '1', sql: HEAVY_SCHEMA }] }), 'attacker schema');
  ok(await pair.mirrorQuery('acme', 'web', { database: 'heavy', sql: 'SELECT 1', minVersion: migrated.json.version }), 'attacker replica');
}

describe('reference mirror: a tenant\'s expressions do not stall other orgs\' replicas', () => {
  describe('applies under the time limit', () => {
    let pair: Pair;
    before(async () => {
      pair = await startPair();
      await setUp(pair);
    });
    after(() => pair?.close());

    test('an expensive CHECK on every row: another org\'s mirror reads and hooks stay quick; the replica converges by applying', async () => {
      // Without the fix each attacking event holds the mirror's event loop ≈ 1.2 s: reads and hooks wait behind it.
      const acked = await attackOthersUnharmed(pair);
      const rows = await assertConverges(pair);
      assert.ok(rows >= acked.length * ROWS, `every acknowledged row is on the replica (${rows})`);
      // Applied event by event, in executors: only the migration (the first event) came as a snapshot.
      const heavyBootstraps = pair.logs('replica bootstrapped from snapshot').filter((l) => l.database === 'heavy');
      assert.ok(heavyBootstraps.length <= 2, `the attacker's events were applied, not healed from snapshots: ${JSON.stringify(heavyBootstraps.map((l) => l.why))}`);
    });
  });

  describe('applies past the mirror\'s time limit', () => {
    let pair: Pair;
    before(async () => {
      // The mirror's own limit is far below one attacking event's apply (≈ 1.2 s): every apply would be stopped.
      pair = await startPair({ DB_QUERY_TIMEOUT_MS: '300' });
      await setUp(pair);
    });
    after(() => pair?.close());

    test('a stopped apply heals the replica from a snapshot, stops do not repeat per write, other orgs never wait', async () => {
      const acked = await attackOthersUnharmed(pair);
      const stops = pair.logs('replica bootstrapped from snapshot').filter((l) => l.database === 'heavy' && /stopped/.test(String(l.why)));
      assert.ok(stops.length >= 1, 'an apply past the mirror\'s limit was stopped and the replica healed from a snapshot');
      // After a stop, the database's events heal from snapshots for a while (10 s first): one stop, not one a write.
      const restarts = pair.logs('mirror executor restarted').length;
      assert.ok(restarts >= 1 && restarts <= 2, `${restarts} executors stopped for ${acked.length} attacking writes`);
      await assertConverges(pair);
    });
  });
});
