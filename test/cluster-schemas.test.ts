// Crafted schemas against a cluster (attack round, 2026-11-26): what a tenant can send (its repo secret, the HTTP API,
// /_db/import) reaches a follower only as the primary's own file or its changesets. A crafted file is refused on the
// primary as on one node, leaving no placement (once its claim is idle), file or copy anywhere; another org's database on the same nodes is
// untouched; a schema the primary accepts (full-text, CHECK, generated and expression-indexed columns) is applied on
// the follower, whose connection runs the tenant's expressions as the executor does (trusted_schema=OFF), in line.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { DatabaseSync } from 'node:sqlite';
import { eventIds, startCluster, type TestCluster } from './helpers/cluster.ts';
import { upload } from './helpers/imports.ts';
import { tempDir } from './helpers/product.ts';
import { GIVE_BACK_IDLE_MS } from '../src/cluster/claims.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

const ORG = 'acme';

describe('cluster: crafted schemas', () => {
  let cluster: TestCluster;
  let dir: string;
  before(async () => {
    cluster = await startCluster({ nodes: 3, ttlS: 4, env: { LOG_LEVEL: process.env.TEST_CLUSTER_LOG ?? 'silent' } });
    dir = tempDir('scopebase-cluster-crafted-');
    for (const sql of ['CREATE TABLE secrets(k)', "INSERT INTO secrets VALUES ('victim-secret')"]) {
      assert.equal((await cluster.proxy.db('app', 'execute', { sql }, { org: 'victim' })).status, 200);
    }
  });
  after(async () => {
    await cluster?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  function crafted(name: string, edit: (db: DatabaseSync) => void): Buffer {
    const path = join(dir, `${name}.sqlite`);
    const db = openSqlite(path);
    db.exec('PRAGMA journal_mode=DELETE');
    db.enableDefensive(false);
    edit(db);
    db.close();
    return readFileSync(path);
  }

  test('crafted imports are refused on the primary; nothing is placed, made or copied; another org\'s database is as it was', async () => {
    const victim = await cluster.placement('victim', 'app', 'main');
    assert.ok(victim !== null && victim.follower !== null);
    const files: Buffer[] = [];
    for (const n of cluster.nodes) {
      const path = join(n.dataDir, 'db', 'victim', 'app', 'main.sqlite');
      files.push(crafted(`extra-${n.id}`, (db) => {
        db.exec('CREATE TABLE t(a); INSERT INTO t VALUES (1); PRAGMA writable_schema=ON');
        db.prepare("UPDATE sqlite_schema SET sql = ? WHERE name = 't'").run(`CREATE TABLE t(a); COMMIT; DETACH src; ATTACH '${path}' AS src; UPDATE src.secrets SET k = 'overwritten'; BEGIN`);
        db.exec('PRAGMA writable_schema=OFF');
      }));
    }
    files.push(crafted('shadow', (db) => {
      db.exec("CREATE VIRTUAL TABLE f USING fts5(a); INSERT INTO f VALUES ('hello'); PRAGMA writable_schema=ON");
      const row = db.prepare("SELECT * FROM sqlite_schema WHERE name = 'f'").get() as Record<string, string | number>;
      db.prepare("DELETE FROM sqlite_schema WHERE name = 'f'").run();
      db.prepare("INSERT INTO sqlite_schema(type, name, tbl_name, rootpage, sql) VALUES ('trigger', 'tr', 'f_data', 0, 'CREATE TRIGGER tr AFTER INSERT ON f_data BEGIN SELECT 1; END')").run();
      db.prepare('INSERT INTO sqlite_schema(type, name, tbl_name, rootpage, sql) VALUES (?, ?, ?, ?, ?)').run(row.type!, row.name!, row.tbl_name!, row.rootpage!, row.sql!);
      db.exec('PRAGMA writable_schema=OFF');
    }));
    for (const [i, bytes] of files.entries()) {
      const r = await upload(cluster.proxy, 'web', `database=crafted${i}`, bytes);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.code, 'not_allowed', r.text);
      for (const n of cluster.nodes) assert.ok(!existsSync(join(n.dataDir, 'db', ORG, 'web', `crafted${i}.sqlite`)), `crafted${i}: no file on ${n.id}`);
    }
    // A failed first write's claim is given back once no write came for GIVE_BACK_IDLE_MS.
    const placed = async () => (await Promise.all(files.map((_, i) => cluster.placement(ORG, 'web', `crafted${i}`)))).filter((p) => p !== null);
    for (const end = performance.now() + GIVE_BACK_IDLE_MS + 5000; (await placed()).length > 0 && performance.now() < end;) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(await placed(), [], 'no placement left');
    const rows = await cluster.proxy.db('app', 'query', { sql: 'SELECT k FROM secrets' }, { org: 'victim' });
    assert.deepEqual(rows.json.results[0].rows, [['victim-secret']]);
    for (const id of [victim.primary, victim.follower!]) {
      const copy = openSqlite(join(cluster.node(id).dataDir, 'db', 'victim', 'app', 'main.sqlite'), { readOnly: true });
      try {
        assert.deepEqual(copy.prepare('SELECT k FROM secrets').all().map((r) => r.k), ['victim-secret'], `the victim's copy on ${id}`);
      } finally {
        copy.close();
      }
    }
  });

  test('a schema with full-text, CHECK, generated and expression-indexed columns replicates: the follower applies every write, in line', async () => {
    const migrate = await cluster.proxy.db('web', 'migrate', { database: 'rich', migrations: [{ id: '1', sql: `
      CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT NOT NULL CHECK (length(a) < 100 AND a NOT GLOB '*x*'), up TEXT GENERATED ALWAYS AS (upper(a)) STORED, n INTEGER CHECK (n IS NULL OR abs(n) < 1000));
      CREATE INDEX t_low ON t (lower(a), n * 2) WHERE n IS NOT NULL;
      CREATE VIRTUAL TABLE f USING fts5(body);` }] });
    assert.equal(migrate.status, 200, migrate.text);
    for (let i = 0; i < 20; i++) {
      const w = await cluster.proxy.db('web', 'execute', { database: 'rich', statements: [
        { sql: 'INSERT INTO t (a, n) VALUES (?, ?)', params: [`row ${i}`, i] },
        { sql: 'INSERT INTO f (body) VALUES (?)', params: [`hello world ${i}`] },
        ...(i % 5 === 4 ? [{ sql: 'UPDATE t SET n = -n WHERE id = ?', params: [i - 1] }, { sql: 'DELETE FROM f WHERE rowid = ?', params: [i - 2] }] : []),
      ] });
      assert.equal(w.status, 200, w.text);
    }
    const bad = await cluster.proxy.db('web', 'execute', { database: 'rich', sql: "INSERT INTO t (a) VALUES ('xx')" });
    assert.equal(bad.status, 409, bad.text);
    const p = (await cluster.placement(ORG, 'web', 'rich'))!;
    const onPrimary = eventIds(cluster.node(p.primary), ORG, 'web', 'rich');
    assert.deepEqual([...eventIds(cluster.node(p.follower!), ORG, 'web', 'rich')], [...onPrimary], 'the follower holds every event the primary does');
    const copy = openSqlite(join(cluster.node(p.follower!).dataDir, 'db', ORG, 'web', 'rich.sqlite'), { readOnly: true });
    try {
      assert.equal((copy.prepare('PRAGMA integrity_check').get() as { integrity_check: string }).integrity_check, 'ok');
      assert.deepEqual({ ...copy.prepare("SELECT count(*) AS c FROM f WHERE f MATCH 'hello'").get() }, { c: 16 });
      assert.deepEqual({ ...copy.prepare('SELECT up, n FROM t WHERE id = 3').get() }, { up: 'ROW 2', n: -2 });
    } finally {
      copy.close();
    }
  });
});
