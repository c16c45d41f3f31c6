// A whole-instance restore (SPEC 9.2) and a mirror in another process (found by a sweep, 2026-11-26): the restored
// databases go on from the backup's versions, so the versions lost with the disk are numbered again with other
// content, and a mirror that had received the lost ones took the new ones for duplicates and kept the lost rows:
// primary and replica answered the same version with different rows. The product and `serve mirror` run as their own
// processes, the backup and restore as `scopebase backup|restore`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { call, ROOT_KEY, spawnProduct, tempDir, testEnv, type HttpResult, type SpawnedProduct } from './helpers/product.ts';
import { freePort } from './helpers/ports.ts';
import { newSecret, waitFor } from './helpers/mirror.ts';
import { runCli } from './helpers/cli.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const auth = { authorization: `Bearer ${repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web')}` };
const ROWS = 'SELECT id, v FROM t ORDER BY id';

interface Setup {
  primaryEnv: Record<string, string>;
  dataDir: string;
  work: string;
  mirror: SpawnedProduct;
  /** The mirror killed (-9) and started again on its DATA_DIR: it knows its replicas only from their files. */
  restartMirror(): Promise<void>;
  /** The primary; `env` over its usual environment. */
  start(env?: Record<string, string>): Promise<SpawnedProduct>;
  execute(primary: SpawnedProduct, sql: string, params?: unknown[]): Promise<number>;
  rows(url: string, minVersion?: number): Promise<HttpResult>;
  cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }>;
  close(): void;
}

/** A primary delivering to a reference mirror in its own process with its own DATA_DIR; the primary on a fixed port. */
async function setup(): Promise<Setup> {
  const work = tempDir('scopebase-restore-mirror-');
  const dataDir = join(work, 'data');
  const secret = newSecret();
  const [port, mirrorPort] = [await freePort(), await freePort()];
  const primaryEnv = testEnv(dataDir, {
    PORT: String(port), DB_MIRROR_MAX_BACKOFF_MS: '200',
    DB_MIRRORS: JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${mirrorPort}/hook`, secret }]),
  });
  const mirrorEnv = testEnv(join(work, 'mirror-data'), {
    MIRROR_PORT: String(mirrorPort), MIRROR_SECRET: secret, MIRROR_SOURCE_URL: `http://127.0.0.1:${port}`,
  });
  const mirror = await spawnProduct(mirrorEnv, ['serve', 'mirror']);
  const running: SpawnedProduct[] = [mirror];
  const s: Setup = {
    primaryEnv, dataDir, work, mirror,
    async restartMirror() {
      await stop(s.mirror);
      s.mirror = await spawnProduct(mirrorEnv, ['serve', 'mirror']);
      running.push(s.mirror);
    },
    async start(env = {}) {
      const p = await spawnProduct({ ...primaryEnv, ...env });
      running.push(p);
      return p;
    },
    async execute(primary, sql, params = []) {
      const r = await call(primary.url, 'localhost', '/web/_db/execute', { body: { sql, params }, headers: auth });
      assert.equal(r.status, 200, r.text);
      return r.json.version as number;
    },
    rows: (url, minVersion) => call(url, 'localhost', '/web/_db/query', { body: { sql: ROWS, ...(minVersion === undefined ? {} : { minVersion }) }, headers: auth }),
    cli: (args) => runCli(args, { ...process.env, DATA_DIR: dataDir }),
    close() {
      for (const p of running) {
        try {
          p.killAll();
        } catch { /* gone already */ }
      }
      rmSync(work, { recursive: true, force: true });
    },
  };
  return s;
}

async function stop(p: SpawnedProduct): Promise<void> {
  const exited = new Promise((r) => p.child.once('exit', r));
  p.killAll(); // a crash: it holds no lock, so restore goes ahead
  await exited;
}

/** The mirror has applied `version` (a read with minVersion answers). */
async function mirrorAt(s: Setup, version: number): Promise<HttpResult> {
  let last: HttpResult | undefined;
  await waitFor(async () => (last = await s.rows(s.mirror.url, version)).status === 200, 20_000, `the mirror at version ${version}`).catch(() => {
    throw new Error(`the mirror did not reach version ${version}: ${last?.text}`);
  });
  return last!;
}

/** After the restore and new writes: the mirror holds exactly the primary's rows at the primary's version. */
async function converges(s: Setup, primary: SpawnedProduct, version: number): Promise<void> {
  const want = await s.rows(primary.url);
  assert.equal(want.status, 200, want.text);
  assert.equal(want.json.version, version);
  await waitFor(async () => {
    const got = await s.rows(s.mirror.url);
    return got.status === 200 && JSON.stringify(got.json.results) === JSON.stringify(want.json.results);
  }, 20_000, 'the mirror to hold the primary\'s rows').catch(async () => {
    assert.deepEqual((await s.rows(s.mirror.url)).json, want.json, 'the mirror holds the primary\'s rows');
  });
  const got = await mirrorAt(s, version);
  assert.deepEqual(got.json, want.json);
  assert.deepEqual(got.json.results[0].rows.map((r: unknown[]) => r[1]), ['a', 'b', 'new-c', 'new-d', 'new-e', 'new-f']);
}

/** Rows a, b; then, after the backup, the rows lost with the disk; the writes after the restore take other ids. */
const NEW_ROWS = ['new-c', 'new-d', 'new-e', 'new-f'].map((v, i) => [10 + i, v]);

/** Rows a and b at version 3 (the table is version 1), on the primary and the mirror. */
async function seed(s: Setup, primary: SpawnedProduct): Promise<void> {
  await s.execute(primary, 'CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)');
  await s.execute(primary, "INSERT INTO t (v) VALUES ('a')");
  assert.equal(await s.execute(primary, "INSERT INTO t (v) VALUES ('b')"), 3);
  await mirrorAt(s, 3);
}

/** After the restore: the primary again, and the four new rows written (their last version returned). */
async function restartAndWrite(s: Setup, env?: Record<string, string>): Promise<{ primary: SpawnedProduct; version: number }> {
  const primary = await s.start(env);
  let version = 0;
  for (const [id, v] of NEW_ROWS) version = await s.execute(primary, 'INSERT INTO t (id, v) VALUES (?, ?)', [id, v]);
  return { primary, version };
}

test('after a restore, a mirror in its own process that received the versions lost with the disk converges to the primary', async (t) => {
  const s = await setup();
  t.after(() => s.close());
  const before = await s.start();
  await seed(s, before);
  const backup = join(s.work, 'backup');
  const b = await s.cli(['backup', backup]);
  assert.equal(b.code, 0, b.stderr);
  for (const v of ['old-c', 'old-d', 'old-e']) await s.execute(before, 'INSERT INTO t (v) VALUES (?)', [v]);
  assert.deepEqual((await mirrorAt(s, 6)).json.results[0].rows.map((r: unknown[]) => r[1]), ['a', 'b', 'old-c', 'old-d', 'old-e']);

  await stop(before); // the disk is lost; the backup is put back
  const r = await s.cli(['restore', backup, '--force']);
  assert.equal(r.code, 0, r.stderr);
  const { primary, version } = await restartAndWrite(s);
  await converges(s, primary, version);
  // The restore is a version of its own (3 + 1), as a time-travel restore is: the four writes are 5 to 8.
  assert.equal(version, 8);
  const events = await call(primary.url, 'localhost', '/web/_db/changes', { body: { since: 3 }, headers: auth });
  assert.deepEqual(events.json.events[0], { ...events.json.events[0], type: 'database.restored', operation: 'restore', version: 4, previousVersion: 3, restoredVersion: 3, changeset: null, changes: { rowsAffected: 0, tables: ['t'] } });
});

test('a backup whose delivery state is newer than its database copy (taken one after the other) converges too', async (t) => {
  const s = await setup();
  t.after(() => s.close());
  const before = await s.start();
  await seed(s, before);
  const early = join(s.work, 'early');
  assert.equal((await s.cli(['backup', early])).code, 0);
  for (const v of ['old-c', 'old-d', 'old-e']) await s.execute(before, 'INSERT INTO t (v) VALUES (?)', [v]);
  await mirrorAt(s, 6);
  const saved = async () => (await call(before.url, 'localhost', '/web/_db/status', { body: {}, headers: auth })).json.mirrors[0].deliveredVersion === 6;
  await waitFor(saved, 5000, 'the acknowledgement of version 6 saved');
  await stop(before);
  // The race of a backup taken while the mirror acknowledges: the database copied at version 3, mirrors.sqlite after
  // the mirror acknowledged 6. Made here by backing up a DATA_DIR holding exactly that.
  const db = join(s.dataDir, 'db/acme/web/main.sqlite');
  for (const f of [`${db}-wal`, `${db}-shm`]) rmSync(f, { force: true });
  copyFileSync(join(early, 'db/acme/web/main.sqlite'), db);
  const torn = join(s.work, 'torn');
  const b = await s.cli(['backup', torn, '--json']);
  assert.equal(b.code, 0, b.stderr);
  assert.equal(JSON.parse(b.stdout).manifest.find((f: { kind: string }) => f.kind === 'database').version, 3);

  assert.equal((await s.cli(['restore', torn, '--force'])).code, 0);
  const { primary, version } = await restartAndWrite(s);
  await converges(s, primary, version);
});

for (const mirrorRestarted of [false, true]) {
  const how = mirrorRestarted ? ', the mirror restarted meanwhile' : '';
  test(`after a restore${how}, a minVersion read whose pull comes before the restore's event takes a snapshot, not the new events onto the lost rows`, async (t) => {
    const s = await setup();
    t.after(() => s.close());
    const before = await s.start();
    await seed(s, before);
    const backup = join(s.work, 'backup');
    assert.equal((await s.cli(['backup', backup])).code, 0);
    for (const v of ['old-c', 'old-d', 'old-e']) await s.execute(before, 'INSERT INTO t (v) VALUES (?)', [v]);
    await mirrorAt(s, 6);
    await stop(before);
    assert.equal((await s.cli(['restore', backup, '--force'])).code, 0);
    if (mirrorRestarted) await s.restartMirror(); // what its replica's last event was, it reads from the file
    // The primary cannot reach the mirror now (its events wait out the backoff): only the mirror's pulls bring events.
    const unreachable = JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${await freePort()}/hook`, secret: newSecret() }]);
    const { primary, version } = await restartAndWrite(s, { DB_MIRRORS: unreachable });
    assert.equal(version, 8);
    const want = await s.rows(primary.url);
    // Past the replica's 6: the read pulls the source's change log (its events 7 and 8 are the new rows 12 and 13).
    const got = await s.rows(s.mirror.url, version);
    assert.equal(got.status, 200, got.text);
    assert.deepEqual(got.json, want.json);
  });
}
