// SPEC 9.2: `scopebase backup|restore|verify` as subprocesses against a live instance's DATA_DIR, writes going on.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { startProduct, tempDir, type Product } from './helpers/product.ts';

interface Run { code: number; stdout: string; stderr: string }

function cli(args: string[], dataDir: string): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, DATA_DIR: dataDir } }, (err, stdout, stderr) => {
      resolve({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

const rowsOf = (file: string, sql: string) => {
  const db = new DatabaseSync(file, { readOnly: true });
  try {
    return db.prepare(sql).all();
  } finally {
    db.close();
  }
};

describe('backup, verify, restore', () => {
  let p: Product;
  const work = tempDir('scopebase-backup-');
  const dataDir = join(work, 'data');
  before(async () => {
    p = await startProduct({ DATA_DIR: dataDir });
    for (const [repo, database] of [['web', 'main'], ['web', 'analytics'], ['api', 'main']] as const) {
      const r = await p.db(repo, 'execute', { database, statements: [{ sql: 'CREATE TABLE pairs(n, note)' }, { sql: 'INSERT INTO pairs VALUES (1, ?)', params: [`${repo}/${database}`] }, { sql: 'INSERT INTO pairs VALUES (2, ?)', params: [`${repo}/${database}`] }] });
      assert.equal(r.status, 200, r.text);
    }
  });
  after(async () => {
    await p.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('a backup taken while writes go on is consistent; verify passes; restore fills an empty DATA_DIR that starts with everything', async () => {
    let stop = false;
    let writes = 0;
    const writer = (async () => {
      while (!stop) {
        const r = await p.db('web', 'execute', { statements: [{ sql: "INSERT INTO pairs VALUES (1, 'w')" }, { sql: "INSERT INTO pairs VALUES (2, 'w')" }] });
        assert.equal(r.status, 200);
        writes++;
      }
    })();
    await new Promise((r) => setTimeout(r, 50));
    const b = await cli(['backup', join(work, 'b1')], dataDir);
    stop = true;
    await writer;
    assert.equal(b.code, 0, b.stderr);
    assert.match(b.stdout, /backed up .* into .*b1: 3 databases and \d+ other files, [0-9.]+ MiB; \d+ copied, in/);
    assert.ok(writes > 0);
    const manifest = JSON.parse(readFileSync(join(work, 'b1', 'manifest.json'), 'utf8'));
    const main = manifest.files.find((f: { path: string }) => f.path === 'db/acme/web/main.sqlite');
    assert.deepEqual(main.scope, { org: 'acme', repo: 'web', database: 'main' });
    assert.match(main.sha256, /^[0-9a-f]{64}$/);
    assert.ok(manifest.files.some((f: { path: string }) => f.path === 'accounts.sqlite'), 'the account store is in it');
    // Consistent: each write adds a version and two rows, so the copy's row count matches its version exactly.
    const [{ n }] = rowsOf(join(work, 'b1', main.path), 'SELECT count(*) AS n FROM pairs') as { n: number }[];
    assert.equal(n, 2 + 2 * (main.version - 1), `copy at version ${main.version} holds ${n} rows`);

    const v = await cli(['verify', join(work, 'b1')], dataDir);
    assert.equal(v.code, 0, v.stderr);
    assert.match(v.stdout, /OK — \d+ files match the manifest/);

    const fresh = join(work, 'restored');
    const r = await cli(['restore', join(work, 'b1')], fresh);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /restored .*b1 .* into .*restored: 3 databases/);
    const q = await startProduct({ DATA_DIR: fresh });
    try {
      const status = await q.db('web', 'status', {});
      assert.equal(status.json.version, main.version);
      assert.equal((await q.db('web', 'query', { sql: 'SELECT count(*) FROM pairs' })).json.results[0].rows[0][0], n);
      assert.deepEqual((await q.db('api', 'query', { sql: 'SELECT note FROM pairs ORDER BY n' })).json.results[0].rows, [['api/main'], ['api/main']]);
      const w = await q.db('web', 'execute', { sql: "INSERT INTO pairs VALUES (3, 'after restore')" });
      assert.equal(w.json.version, main.version + 1, 'the restored instance writes on from the backup');
    } finally {
      await q.close();
    }
    const again = await cli(['restore', join(work, 'b1')], fresh);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /is not empty: .*--force/);
    assert.equal((await cli(['restore', join(work, 'b1'), '--force'], fresh)).code, 0);
  });

  test('--incremental copies only what changed and is complete on its own', async () => {
    await cli(['backup', join(work, 'full')], dataDir);
    await p.db('api', 'execute', { sql: "INSERT INTO pairs VALUES (9, 'changed')" });
    const inc = await cli(['backup', join(work, 'inc'), '--incremental', join(work, 'full'), '--json'], dataDir);
    assert.equal(inc.code, 0, inc.stderr);
    const summary = JSON.parse(inc.stdout);
    assert.equal(summary.databases, 3);
    assert.equal(summary.reused, 2, 'the two unchanged databases are reused');
    assert.equal((await cli(['verify', join(work, 'inc')], dataDir)).code, 0);
    rmSync(join(work, 'full'), { recursive: true, force: true }); // complete on its own: hard links keep the data
    assert.equal((await cli(['verify', join(work, 'inc')], dataDir)).code, 0);
    const into = join(work, 'from-inc');
    assert.equal((await cli(['restore', join(work, 'inc')], into)).code, 0);
    assert.equal((rowsOf(join(into, 'db/acme/api/main.sqlite'), "SELECT count(*) AS n FROM pairs WHERE note = 'changed'")[0] as { n: number }).n, 1);
  });

  test('a missing or altered file is named, and restore writes nothing; an interrupted backup never looks finished', async () => {
    await cli(['backup', join(work, 'b2')], dataDir);
    appendFileSync(join(work, 'b2', 'db/acme/web/analytics.sqlite'), 'x');
    const v = await cli(['verify', join(work, 'b2')], dataDir);
    assert.equal(v.code, 1);
    assert.match(v.stderr, /db\/acme\/web\/analytics\.sqlite: \d+ bytes, the manifest says \d+/);
    unlinkSync(join(work, 'b2', 'accounts.sqlite'));
    const into = join(work, 'never');
    const r = await cli(['restore', join(work, 'b2')], into);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /refusing to restore .*nothing was written: accounts\.sqlite: missing; db\/acme\/web\/analytics\.sqlite: \d+ bytes/);
    assert.equal(existsSync(into), false);

    // A file that is not a database stops the backup midway: exit 1, one line, and no manifest.
    mkdirSync(join(dataDir, 'db', 'acme', 'zz'), { recursive: true });
    writeFileSync(join(dataDir, 'db', 'acme', 'zz', 'broken.sqlite'), 'not a database');
    try {
      const b = await cli(['backup', join(work, 'b3')], dataDir);
      assert.equal(b.code, 1);
      assert.match(b.stderr, /backup into .*b3 failed: .*not a database/);
      assert.equal(existsSync(join(work, 'b3', 'manifest.json')), false);
      const half = await cli(['verify', join(work, 'b3')], dataDir);
      assert.equal(half.code, 1);
      assert.match(half.stderr, /no manifest\.json: it is not a finished backup/);
    } finally {
      rmSync(join(dataDir, 'db', 'acme', 'zz'), { recursive: true, force: true });
    }
    const nonEmpty = await cli(['backup', join(work, 'b2')], dataDir);
    assert.equal(nonEmpty.code, 2);
    assert.match(nonEmpty.stderr, /is not empty/);
  });
});
