// Time travel's disk bound per repo (SPEC 4.11): DB_HISTORY_MAX_BYTES is per database, so a repo of 64 databases could
// keep 512 GiB of history; DB_HISTORY_MAX_BYTES_PER_REPO bounds them together. Past it the repo's oldest history goes
// first, whichever database holds it (its own writer or the background sweep drops it, in that database's lane); no
// write is refused. (Idle databases and the days' window: test/db-history-sweep.test.ts.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { startProduct, tempDir, testEnv } from './helpers/product.ts';
import { waitFor } from './helpers/mirror.ts';
import { ConfigError, loadConfig } from '../src/shared/config.ts';

const MIB = 1024 ** 2;

/** Bytes of every file under `dir`. */
function bytesUnder(dir: string): number {
  return readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).reduce((n, e) => n + statSync(join(e.parentPath, e.name)).size, 0);
}

test('a repo\'s databases keep at most DB_HISTORY_MAX_BYTES_PER_REPO of history: the repo\'s oldest goes first, whichever database holds it; writes go on', async () => {
  const cap = 32 * MIB;
  const p = await startProduct({ DB_HISTORY_MAX_BYTES: String(cap), DB_HISTORY_MAX_BYTES_PER_REPO: String(cap), DB_HISTORY_SWEEP_MS: '100' });
  try {
    // Each write replaces a 1 MiB value: ~1 MiB of page images a commit, so 20 of them close a segment (past 16 MiB
    // of log) and the next begins: ~20 MiB of history per database, under the database's cap, over the repo's for two.
    const churn = async (database: string) => {
      const made = await p.db('web', 'execute', { database, statements: [{ sql: 'CREATE TABLE big(id INTEGER PRIMARY KEY, b BLOB)' }, { sql: 'INSERT INTO big VALUES (1, randomblob(1048576))' }] });
      assert.equal(made.status, 200, made.text);
      for (let i = 0; i < 20; i++) {
        const w = await p.db('web', 'execute', { database, sql: 'UPDATE big SET b = randomblob(1048576) WHERE id = 1' });
        assert.equal(w.status, 200, w.text);
      }
    };
    const history = async (database: string) => (await p.db('web', 'status', { database })).json.history;
    await churn('a');
    assert.equal((await history('a')).oldestVersion, 0, 'premise: alone, the repo is under its cap and a keeps all its history');
    await churn('b');
    // b, written past the repo's cap, keeps its history: a's first segment is the repo's oldest, and goes (the sweep).
    await waitFor(async () => (await history('a')).oldestVersion > 1, 15_000, 'a\'s oldest history to go');
    const a = await history('a');
    assert.equal((await history('b')).oldestVersion, 0, 'b keeps all its own: it is newer history');
    const gone = await p.db('web', 'restore', { database: 'a', toVersion: 1 });
    assert.equal(gone.status, 410, gone.text);
    assert.equal(gone.json.error.details.oldestVersion, a.oldestVersion);
    assert.equal((await p.db('web', 'restore', { database: 'a', toVersion: a.oldestVersion, dryRun: true })).status, 200, 'what status names is restorable');
    const kept = bytesUnder(join(p.dataDir, 'history', 'acme', 'web'));
    assert.ok(kept <= cap, `the repo's history holds ${kept} bytes, within ${cap}`);
  } finally {
    await p.close();
  }
});

test('DB_HISTORY_MAX_BYTES_PER_REPO: 8 databases at DB_MAX_SIZE_BYTES by default, never below a database\'s cap; refusals name the variable', () => {
  const dir = tempDir();
  const db = (env: Record<string, string>) => loadConfig(testEnv(dir, env)).db;
  assert.deepEqual([db({}).historyMaxBytes, db({}).historyMaxBytesPerRepo], [8 * 1024 ** 3, 8 * 1024 ** 3]);
  const small = db({ DB_MAX_SIZE_BYTES: String(64 * MIB) });
  assert.deepEqual([small.historyMaxBytes, small.historyMaxBytesPerRepo], [512 * MIB, 512 * MIB], 'both follow the database size limit');
  assert.equal(db({ DB_HISTORY_MAX_BYTES: String(16 * 1024 ** 3) }).historyMaxBytesPerRepo, 16 * 1024 ** 3, 'a database cap set higher raises the default');
  assert.equal(db({ DB_HISTORY_MAX_BYTES_PER_REPO: String(100 * MIB) }).historyMaxBytes, 100 * MIB, 'a database\'s default is within its repo\'s');
  const refused = (env: Record<string, string>, message: RegExp) => assert.throws(() => db(env), (e: unknown) => e instanceof ConfigError && message.test(e.message));
  refused({ DB_HISTORY_MAX_BYTES: String(2 * MIB), DB_HISTORY_MAX_BYTES_PER_REPO: String(MIB) }, /^DB_HISTORY_MAX_BYTES: must not be above DB_HISTORY_MAX_BYTES_PER_REPO \(2097152 > 1048576\)/);
  refused({ DB_HISTORY_MAX_BYTES_PER_REPO: '1000' }, /^DB_HISTORY_MAX_BYTES_PER_REPO: must be between 1048576 and/);
  refused({ DB_HISTORY_MAX_BYTES_PER_REPO: '8GiB' }, /^DB_HISTORY_MAX_BYTES_PER_REPO: must be a whole number/);
});
