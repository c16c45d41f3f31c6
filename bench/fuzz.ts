// `npm run fuzz`: generated requests (fast-check) against one real product process over loopback HTTP — valid,
// near-valid and hostile, to every endpoint group: the database API, the libSQL protocol, accounts and credentials,
// apps' paths, the admin port. What must hold (docs/reliability.md):
//   - no 500 and no 5xx but 503 with Retry-After; every error in SPEC 3's shape (JSON, or an HTML page for a browser);
//   - no request hangs (each has 15 s) and the process never exits;
//   - a model database, written all along by valid and near-valid writes, equals a local SQLite model at the end.
// Beside the main lane, one request in ten goes to the reference mirror's own port (deliveries and reads,
// bench/fuzz/mirror.ts) and one in ten to apps with a real app behind the proxy (bench/fuzz/apps.ts): no spoofed
// identity header reaches the app, its replies pass through, an app down or resetting is 503; at the end every
// mirrored database's replica equals the primary (bench/fuzz/lanes.ts).
//   --requests N   hostile requests (default 100,000; --short: 3,000)    --seed S   fast-check's seed
import { parseArgs } from 'node:util';
import { DatabaseSync } from 'node:sqlite';
import { rmSync } from 'node:fs';
import fc from 'fast-check';
import { request } from 'undici';
import { again, agent, closedWhileSending, judge, send, shape, type Failure, type Req } from './fuzz/judge.ts';
import { repoSecret } from '../src/shared/secrets.ts';
import { startInstance, type Instance } from './scopebase/instance.ts';
import { LANE_EVERY, prepareLanes } from './fuzz/lanes.ts';
import { sendJson, type JsonAnswer } from './lib/http.ts';

const { values: args } = parseArgs({ options: { short: { type: 'boolean', default: false }, requests: { type: 'string' }, seed: { type: 'string' } } });
const TOTAL = Number(args.requests ?? (args.short ? 3_000 : 100_000));
const SEED = Number(args.seed ?? Date.now() % 1_000_000);
const CONCURRENCY = 16;
const log = (s: string) => process.stderr.write(`[fuzz] ${s}\n`);


// --- what is sent ------------------------------------------------------------------------------------------------

const weird = fc.constantFrom('..', '%2e%2e', '%2F', '%00', 'é', '\u202e', ' ', '~', '.', '_db', '_account', 'a'.repeat(300), '%', '%zz', '//');
const repoName = fc.oneof({ weight: 6, arbitrary: fc.constantFrom('web', 'other', 'site') }, { weight: 1, arbitrary: fc.stringMatching(/^[a-z0-9][a-z0-9-]{0,20}$/) }, { weight: 1, arbitrary: weird });
const tail = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('_db/status', '_db/query', '_db/execute', '_db/migrate', '_db/restore', '_db/export', '_db/import', '_db/changes', '_db/snapshot', '_db/v2/pipeline', '_db/v3/pipeline', '_db/v3/cursor', '_db/main/v2/pipeline', '_db/other/v2/pipeline', '_db/v2', '_db/v3') },
  { weight: 4, arbitrary: fc.constantFrom('_account/login', '_account/callback', '_account/verify', '_account/logout', '_account/', '_account', '_account/credentials', '_account/credentials/github/token', '_account/credentials/form') },
  { weight: 2, arbitrary: fc.constantFrom('', 'index.html', 'api/items', '_scopebase/openapi.json', '_db', '_db/', '_db/nope', '_db/a/b/c/v2/pipeline') },
  { weight: 1, arbitrary: fc.array(fc.oneof(weird, fc.string({ maxLength: 8 })), { maxLength: 4 }).map((p) => p.join('/')) },
);
const query = fc.oneof({ weight: 4, arbitrary: fc.constant('') }, { weight: 1, arbitrary: fc.constantFrom('?database=x&mode=create', '?return_to=https://evil.example/', '?return_to=/web/ok', '?code=x&state=y', '?database=..%2F..', '?%zz=1', `?q=${'x'.repeat(5000)}`) });
const sql = fc.oneof(
  fc.constantFrom('SELECT 1', 'SELECT * FROM kv', 'INSERT INTO kv(v) VALUES (1)', 'CREATE TABLE IF NOT EXISTS f(x)', 'ATTACH \'/etc/passwd\' AS p', 'PRAGMA writable_schema=1',
    'SELECT * FROM _scopebase_meta', 'DROP TABLE _scopebase_changes', 'BEGIN', 'COMMIT', 'VACUUM', "SELECT load_extension('x')", 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c LIMIT 100000) SELECT count(*) FROM c',
    'ALTER TABLE kv ALTER COLUMN v TO v TEXT --', 'SELECT ?', 'SELECT :a, ?', "SELECT '", 'CREATE TEMP TABLE t(x)', 'PRAGMA foreign_keys=OFF',
    'BEGIN TRANSACTION READONLY', 'SELECT \'\\ud83d\'', "SELECT '\u00e9'"),
  fc.string({ maxLength: 60 }),
);
const jsonBody = fc.oneof(
  fc.record({ sql, params: fc.option(fc.array(fc.oneof(fc.integer(), fc.string(), fc.constant(null), fc.record({ $bigint: fc.string() }), fc.record({ $blob: fc.string() })), { maxLength: 3 }), { nil: undefined }), database: fc.option(fc.oneof(fc.constantFrom('main', 'scratch', 'other'), fc.string({ maxLength: 10 })), { nil: undefined }) }, { requiredKeys: ['sql'] }),
  fc.record({ statements: fc.array(fc.record({ sql }), { maxLength: 4 }) }),
  fc.record({ migrations: fc.array(fc.record({ id: fc.string({ maxLength: 8 }), sql }), { maxLength: 3 }), dryRun: fc.boolean() }),
  fc.record({ toVersion: fc.oneof(fc.integer(), fc.double(), fc.string()), dryRun: fc.constant(true) }),
  fc.record({ format: fc.constantFrom('sqlite', 'sql', 'csv', ''), since: fc.integer(), limit: fc.integer() }, { requiredKeys: [] }),
  fc.record({ baton: fc.option(fc.string(), { nil: null }), requests: fc.array(fc.oneof(
    fc.record({ type: fc.constant('execute'), stmt: fc.record({ sql, args: fc.array(fc.record({ type: fc.constantFrom('integer', 'text', 'float', 'blob', 'null', 'nope'), value: fc.oneof(fc.string(), fc.integer()) }), { maxLength: 2 }) }) }),
    fc.record({ type: fc.constant('batch'), batch: fc.record({ steps: fc.array(fc.record({ stmt: fc.record({ sql }), condition: fc.option(fc.oneof(fc.record({ type: fc.constantFrom('ok', 'error', 'not', 'and', 'or', 'is_autocommit', 'x'), step: fc.integer({ min: -2, max: 5 }) }), fc.anything()), { nil: null }) }), { maxLength: 4 }) }) }),
    fc.record({ type: fc.constantFrom('sequence', 'describe', 'store_sql', 'close_sql', 'get_autocommit', 'close', 'open_stream', 'nope'), sql: fc.option(sql, { nil: undefined }), sql_id: fc.option(fc.integer(), { nil: undefined }) }),
    fc.anything(),
  ), { maxLength: 4 }) }),
  fc.json().map((j) => JSON.parse(j) as unknown),
);
const rawBody = fc.oneof(
  { weight: 6, arbitrary: jsonBody.map((b) => JSON.stringify(b)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)) },
  { weight: 1, arbitrary: fc.constantFrom('{"sql":', '[]', 'null', '{"sql":"SELECT 1"}'.repeat(2), '{"__proto__":{"x":1},"sql":"SELECT 1"}', `{"sql":"${'x'.repeat(3_000_000)}"}`, '{"sql":"SELECT ?","params":["\\ud800"]}', '{"baton":null,"batch":{"steps":[{"stmt":{"sql":"SELECT 1"}}]}}') },
  { weight: 1, arbitrary: fc.constantFrom(Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x7d]), Buffer.from('{"sql":"SELECT 1","params":[1e400]}')) },
);

function arbitraryRequest(inst: Instance, adminHost: string): fc.Arbitrary<Req> {
  const auth = fc.constantFrom('web', 'other', 'wrongorg', 'garbage', 'none', 'basic', 'empty');
  return fc.record({
    method: fc.oneof({ weight: 6, arbitrary: fc.constantFrom('POST', 'GET') }, { weight: 1, arbitrary: fc.constantFrom('PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'TRACE') }),
    admin: fc.boolean().map((b) => b && Math.random() < 0.1),
    repo: repoName, tail, query, auth, body: fc.option(rawBody, { nil: undefined }),
    host: fc.oneof({ weight: 8, arbitrary: fc.constant(inst.host) }, { weight: 1, arbitrary: fc.constantFrom('other.localhost', 'localhost', '', 'ACME.LOCALHOST', 'acme.localhost.', 'a..b.localhost', 'x'.repeat(300) + '.localhost', '127.0.0.1') }),
    accept: fc.constantFrom(undefined, 'application/json', 'text/html', '*/*', 'text/html;q=0.1, application/json'),
    contentType: fc.constantFrom(undefined, 'application/json', 'text/plain', 'application/x-www-form-urlencoded', 'application/sql', 'application/vnd.sqlite3', 'multipart/form-data; boundary=x'),
    cookie: fc.option(fc.oneof(fc.string({ maxLength: 60 }), fc.constant(`sb_session=${'A'.repeat(4000)}`)), { nil: undefined }),
    big: fc.boolean().map((b) => b && Math.random() < 0.02),
    encoding: fc.oneof({ weight: 20, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom('gzip', 'identity', 'br, gzip', 'x') }),
  }).map((r) => {
    const headers: Record<string, string> = {};
    if (r.host) headers.host = r.admin ? adminHost : r.host;
    if (r.accept) headers.accept = r.accept;
    if (r.contentType) headers['content-type'] = r.contentType;
    if (r.cookie) headers.cookie = r.cookie;
    if (r.big) headers['x-padding'] = 'p'.repeat(12_000);
    if (r.encoding) headers['content-encoding'] = r.encoding;
    const secret = (org: string, repo: string) => repoSecret(inst.rootKey, org, repo);
    const byAuth: Record<string, string | undefined> = { web: `Bearer ${secret('acme', 'web')}`, other: `Bearer ${secret('acme', 'other')}`, wrongorg: `Bearer ${secret('evil', 'web')}`, garbage: 'Bearer x.y.z', none: undefined, basic: 'Basic YTpi', empty: 'Bearer ' };
    if (byAuth[r.auth]) headers.authorization = byAuth[r.auth]!;
    const path = r.admin ? `/${r.tail}${r.query}` : `/${r.repo}/${r.tail}${r.query}`;
    return { method: r.method, base: r.admin ? 'admin' : 'proxy', path, headers, ...(r.body !== undefined && r.method !== 'GET' && r.method !== 'HEAD' ? { body: r.body } : {}) } as Req;
  });
}

// --- the model: writes whose outcome is known, checked against a local SQLite at the end ---------------------------

const MODEL_SQL = { put: 'INSERT INTO kv(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v', del: 'DELETE FROM kv WHERE k = ?' };
type Value = number | string | null;
interface ModelOp { sql: string; params: Value[]; via: 'execute' | 'libsql' | 'libsql-tx'; near: 'valid' | 'bad-param' | 'rolled-back' }
const modelOp: fc.Arbitrary<ModelOp> = fc.record({
  put: fc.boolean(), k: fc.integer({ min: 1, max: 40 }), v: fc.oneof(fc.integer(), fc.string({ maxLength: 20 }), fc.constant(null)),
  via: fc.constantFrom('execute', 'libsql', 'libsql-tx'), near: fc.constantFrom('valid', 'valid', 'valid', 'bad-param', 'rolled-back'),
}).map((o) => ({ sql: o.put ? MODEL_SQL.put : MODEL_SQL.del, params: o.put ? [o.k, o.v] : [o.k], via: o.via, near: o.via === 'execute' && o.near === 'rolled-back' ? 'valid' : o.near }) as ModelOp);

const hranaArg = (v: Value) => (v === null ? { type: 'null' } : typeof v === 'number' ? { type: 'integer', value: String(v) } : { type: 'text', value: v });

/** Sends one model write; true when it committed (so the model applies it too). */
async function modelWrite(inst: Instance, op: ModelOp): Promise<boolean> {
  const headers = { host: inst.host, authorization: `Bearer ${inst.secret('web')}`, 'content-type': 'application/json' };
  if (op.via === 'execute') {
    const params = op.near === 'bad-param' ? [{ $bigint: 'not a number' }, ...op.params.slice(1)] : op.params;
    const res = await request(`${inst.proxyUrl}/web/_db/execute`, { method: 'POST', headers, body: JSON.stringify({ database: 'model', sql: op.sql, params }), dispatcher: agent });
    await res.body.dump();
    return res.statusCode === 200;
  }
  const args = op.near === 'bad-param' ? [{ type: 'integer', value: 'nope' }, ...op.params.slice(1).map(hranaArg)] : op.params.map(hranaArg);
  const stmt = (sql: string, a: unknown[] = []) => ({ type: 'execute', stmt: { sql, args: a } });
  const requests = op.via === 'libsql' ? [stmt(op.sql, args), { type: 'close' }]
    : [stmt('BEGIN'), stmt(op.sql, args), stmt(op.near === 'rolled-back' ? 'ROLLBACK' : 'COMMIT'), { type: 'close' }];
  const res = await request(`${inst.proxyUrl}/web/_db/model/v2/pipeline`, { method: 'POST', headers, body: JSON.stringify({ baton: null, requests }), dispatcher: agent });
  const body = await res.body.json() as { results: { type: string }[] };
  if (res.statusCode !== 200) return false;
  if (op.via === 'libsql') return body.results[0]!.type === 'ok';
  return op.near !== 'rolled-back' && body.results.slice(0, 3).every((r) => r.type === 'ok');
}

// --- the run -------------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const extra = await prepareLanes(SEED, !args.short);
  const inst = await startInstance({ mode: 'one', dataDir: extra.dataDir, env: { DB_QUERY_TIMEOUT_MS: '2000', DB_RATE_LIMIT_PER_REPO: '0', ...extra.env } });
  const { lanes, finish } = extra.attach(inst);
  const adminPort = inst.env.ADMIN_PORT!;
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const failures: Failure[] = [];
  const statuses = new Map<number, number>();
  const t0 = performance.now();
  try {
    const made = await request(`${inst.proxyUrl}/web/_db/migrate`, { method: 'POST', headers: { host: inst.host, authorization: `Bearer ${inst.secret('web')}`, 'content-type': 'application/json' }, body: JSON.stringify({ database: 'model', migrations: [{ id: '1', sql: 'CREATE TABLE kv(k INTEGER PRIMARY KEY, v)' }] }), dispatcher: agent });
    if (made.statusCode !== 200) throw new Error(`model migrate: ${made.statusCode} ${await made.body.text()}`);
    await made.body.dump();
    const model = new DatabaseSync(':memory:');
    model.exec('CREATE TABLE kv(k INTEGER PRIMARY KEY, v)');
    log(`seed ${SEED}, ${TOTAL} requests, ${CONCURRENCY} at a time, and a model lane`);

    const arb = arbitraryRequest(inst, `acme.localhost:${adminPort}`);
    const bases = { proxy: inst.proxyUrl, admin: adminUrl };
    let next = 0;
    let done = 0;
    let modelWrites = 0;
    let closedEarly = 0; // see closedWhileSending
    const chunk = new Map<number, Req[]>();
    const take = (i: number): Req => {
      const c = Math.floor(i / 500);
      if (!chunk.has(c)) {
        chunk.set(c, fc.sample(arb, { numRuns: 500, seed: SEED + c }));
        chunk.delete(c - 2);
      }
      return chunk.get(c)![i % 500]!;
    };
    const worker = async () => {
      while (next < TOTAL) {
        const i = next++;
        const lane = lanes.find((l) => l.slot === i % LANE_EVERY);
        if (lane) {
          const failed = await lane.run(i);
          if (failed) failures.push(failed);
          if (++done % 10_000 === 0) log(`${done} requests, ${((performance.now() - t0) / 1000).toFixed(0)} s, ${failures.length} failures`);
          continue;
        }
        const r = take(i);
        const what = `${r.method} ${r.base === 'admin' ? '(admin) ' : ''}${r.path.slice(0, 120)}`;
        try {
          const res = await send(bases, r);
          statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
          const why = judge(r, res);
          if (why) failures.push({ req: `${what} ${typeof r.body === 'string' ? r.body.slice(0, 200) : ''}`, status: res.status, why });
        } catch (e) {
          const sentAgain = await again(bases, r);
          if (closedWhileSending(r, e, sentAgain)) closedEarly++;
          else failures.push({ req: `${what} ${shape(r)}`, status: 0, why: `no answer: ${(e as Error).message}${sentAgain}` });
        }
        if (++done % 10_000 === 0) log(`${done} requests, ${((performance.now() - t0) / 1000).toFixed(0)} s, ${failures.length} failures`);
      }
    };
    const lane = async () => {
      const ops = fc.sample(modelOp, { numRuns: Math.max(200, Math.floor(TOTAL / 20)), seed: SEED });
      for (const op of ops) {
        if (next >= TOTAL) break;
        if (await modelWrite(inst, op)) {
          model.prepare(op.sql).run(...op.params);
          modelWrites++;
        }
      }
    };
    await Promise.all([...Array.from({ length: CONCURRENCY }, worker), lane()]);

    const alive = inst.servers.every((s) => s.child.exitCode === null && s.child.signalCode === null);
    if (!alive) failures.push({ req: '(the process)', status: 0, why: `it exited: ${inst.servers[0]!.output().slice(-500)}` });
    let read: JsonAnswer = { status: 0, json: null };
    for (let i = 0; i < 20 && read.status !== 200; i++) { // 503 (shedding, documented) is retried
      if (i) await new Promise((r) => setTimeout(r, 500));
      read = await sendJson(`${inst.proxyUrl}/web/_db/query`, { headers: { host: inst.host, authorization: `Bearer ${inst.secret('web')}` }, body: { database: 'model', sql: 'SELECT k, v FROM kv ORDER BY k' }, dispatcher: agent });
    }
    const rows = JSON.stringify(read.json?.results?.[0]?.rows ?? `${read.status} ${JSON.stringify(read.json)}`);
    const expected = JSON.stringify(model.prepare('SELECT k, v FROM kv ORDER BY k').all().map((r) => [r.k, r.v]));
    if (rows !== expected) failures.push({ req: '(the model database)', status: 0, why: `product ${rows.slice(0, 300)} != model ${expected.slice(0, 300)}` });
    const seconds = (performance.now() - t0) / 1000;
    const sorted = (m: Map<number, number>) => JSON.stringify(Object.fromEntries([...m].sort((a, b) => a[0] - b[0])));
    log(`${done} requests in ${seconds.toFixed(1)} s (${(done / seconds).toFixed(0)}/s); ${modelWrites} model writes committed; statuses ${sorted(statuses)}${closedEarly > 0 ? `; ${closedEarly} large bodies refused from their headers saw the connection close while still sending (answered below 500 when sent again)` : ''}`);
    for (const l of lanes) log(`  ${l.name} lane: ${[...l.statuses.values()].reduce((a, b) => a + b, 0)} answered, statuses ${sorted(l.statuses)}`);
    const end = await finish();
    failures.push(...end.failures);
    for (const n of end.notes) log(`  ${n}`);
  } finally {
    await inst.stop();
    extra.close();
    rmSync(extra.dataDir, { recursive: true, force: true });
    await agent.close();
  }
  if (failures.length) {
    for (const f of failures.slice(0, 20)) log(`FAIL ${f.status} ${f.req}\n       ${f.why}`);
    log(`${failures.length} failures (seed ${SEED}: --seed ${SEED} reproduces them)`);
    process.exit(1);
  }
  log('OK: no 5xx but 503 with Retry-After, every error in SPEC 3\'s shape, no hang, no crash, no spoofed header at the app, the model and the mirror\'s replicas match');
}

await main();
