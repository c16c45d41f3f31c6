// A process killed while it made a new database (SIGKILL, power loss) leaves its file empty, or holding part of the
// internal tables: SQLite creates the file as it opens it, and each table was made by a statement committed alone.
// Every request to that database then failed for good, 400 "no such table: _scopebase_meta" (a cluster node killed
// in a claim's first write: "no such table: _scopebase_changes"). Such a file is finished at its next open.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { startProduct, tempDir } from './helpers/product.ts';

/** A DATA_DIR whose acme/web database `main` is the file `make` leaves, before the product starts. */
function leftBehind(make: (file: string) => void): string {
  const dataDir = tempDir();
  const dir = join(dataDir, 'db', 'acme', 'web');
  mkdirSync(dir, { recursive: true });
  make(join(dir, 'main.sqlite'));
  return dataDir;
}

const cases: [string, (file: string) => void][] = [
  ['an empty file (killed as SQLite created it)', (file) => writeFileSync(file, '')],
  ['a file with the first internal table only (killed between the statements that make them)', (file) => {
    const db = new DatabaseSync(file);
    db.exec("PRAGMA journal_mode=WAL; CREATE TABLE _scopebase_meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID; INSERT INTO _scopebase_meta VALUES ('version', 0);");
    db.close();
  }],
];

for (const [what, make] of cases) {
  test(`${what}: a database at version 0, written, read and logged as any`, async () => {
    const dataDir = leftBehind(make);
    const p = await startProduct({ DATA_DIR: dataDir });
    try {
      const status = await p.db('web', 'status', {});
      assert.equal(status.status, 200, status.text);
      assert.deepEqual([status.json.exists, status.json.version, status.json.tables], [true, 0, []]);
      for (const sql of ['CREATE TABLE t(x)', 'INSERT INTO t VALUES (1)']) {
        const r = await p.db('web', 'execute', { sql });
        assert.equal(r.status, 200, r.text);
      }
      const rows = await p.db('web', 'query', { sql: 'SELECT x FROM t' });
      assert.deepEqual(rows.json.results[0].rows, [[1]]);
      const changes = await p.db('web', 'changes', { since: 0 });
      assert.deepEqual(changes.json.events.map((e: { version: number }) => e.version), [1, 2], changes.text);
    } finally {
      await p.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
}
