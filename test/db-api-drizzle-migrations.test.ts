// SPEC 4.6 (issue 10) through the proxy over real HTTP: migrations as drizzle-kit and wrangler write them (table
// rebuilds inside PRAGMA foreign_keys=OFF … ON), and foreign keys and rollbacks that fail one write of a group commit.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

describe('migrations as drizzle-kit and wrangler write them (SPEC 4.6, issue 10)', () => {
  let q: Product;
  before(async () => {
    q = await startProduct();
  });
  after(() => q.close());

  const init = { id: '0000_init', sql: 'CREATE TABLE `authors` (`id` integer PRIMARY KEY NOT NULL, `name` text NOT NULL);\n--> statement-breakpoint\nCREATE TABLE `books` (`id` integer PRIMARY KEY NOT NULL, `author_id` integer NOT NULL REFERENCES `authors`(`id`), `title` text);' };
  // drizzle-kit's rebuild of a referenced table: a column changes type.
  const rebuild = {
    id: '0001_rebuild',
    sql: [
      'PRAGMA foreign_keys=OFF;',
      'CREATE TABLE `__new_authors` (`id` integer PRIMARY KEY NOT NULL, `name` text NOT NULL, `born` integer);',
      'INSERT INTO `__new_authors`("id", "name") SELECT "id", "name" FROM `authors`;',
      'DROP TABLE `authors`;',
      'ALTER TABLE `__new_authors` RENAME TO `authors`;',
      'PRAGMA foreign_keys=ON;',
    ].join('\n--> statement-breakpoint\n'),
  };

  test('a table rebuild inside PRAGMA foreign_keys=OFF … ON applies as it is; foreign keys are still checked at the end', async () => {
    assert.equal((await q.db('web', 'migrate', { migrations: [init] })).status, 200);
    await q.db('web', 'execute', { statements: [{ sql: "INSERT INTO authors VALUES (1, 'Le Guin')" }, { sql: "INSERT INTO books VALUES (1, 1, 'Earthsea')" }] });
    const dry = await q.db('web', 'migrate', { dryRun: true, migrations: [init, rebuild] });
    assert.equal(dry.status, 200, dry.text);
    assert.deepEqual(dry.json.applied, ['0001_rebuild']);
    const r = await q.db('web', 'migrate', { migrations: [init, rebuild] });
    assert.equal(r.status, 200, r.text);
    const rows = await q.db('web', 'query', { sql: 'SELECT a.name, a.born, b.title FROM books b JOIN authors a ON a.id = b.author_id' });
    assert.deepEqual(rows.json.results[0].rows, [['Le Guin', null, 'Earthsea']]);
    const orphan = await q.db('web', 'execute', { sql: "INSERT INTO books VALUES (2, 99, 'nobody')" });
    assert.equal(orphan.status, 409, 'foreign keys are still on');
  });

  test('a rebuild of a parent table inside foreign_keys=OFF fires no ON DELETE action: children keep their rows (migrate and execute)', async () => {
    const parent = (db: string) => ({ database: db, migrations: [{ id: '0001', sql: 'CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT); CREATE TABLE posts(id INTEGER PRIMARY KEY, author INTEGER REFERENCES users(id) ON DELETE CASCADE, title TEXT); CREATE TABLE likes(id INTEGER PRIMARY KEY, user INTEGER REFERENCES users(id) ON DELETE SET NULL); INSERT INTO users VALUES (1, \'a\'); INSERT INTO posts VALUES (1, 1, \'p\'); INSERT INTO likes VALUES (1, 1);' }] });
    const rebuildUsers = 'PRAGMA foreign_keys=OFF;\nCREATE TABLE __new_users(id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT \'x\');\nINSERT INTO __new_users SELECT id, name FROM users;\nDROP TABLE users;\nALTER TABLE __new_users RENAME TO users;\nPRAGMA foreign_keys=ON;';
    const children = async (db: string) => (await q.db('web', 'query', { database: db, sql: 'SELECT (SELECT count(*) FROM posts), (SELECT user FROM likes WHERE id = 1), (SELECT count(*) FROM users)' })).json.results[0].rows[0];
    assert.equal((await q.db('web', 'migrate', parent('fkm'))).status, 200);
    const m = await q.db('web', 'migrate', { database: 'fkm', migrations: [...parent('fkm').migrations, { id: '0002', sql: rebuildUsers }] });
    assert.equal(m.status, 200, m.text);
    assert.deepEqual(await children('fkm'), [1, 1, 1], 'the CASCADE and SET NULL of DROP TABLE did not run');
    assert.equal((await q.db('web', 'execute', { database: 'fkm', sql: 'DELETE FROM users' })).status, 200);
    assert.deepEqual(await children('fkm'), [0, null, 0], 'afterwards foreign keys and their actions are on again');

    assert.equal((await q.db('web', 'migrate', parent('fke'))).status, 200);
    const statements = rebuildUsers.split('\n').map((sql) => ({ sql }));
    // Concurrent plain writes may share a group with it: the rebuild still runs alone, with foreign keys off.
    const [e] = await Promise.all([
      q.db('web', 'execute', { database: 'fke', statements }),
      ...Array.from({ length: 4 }, (_, i) => q.db('web', 'execute', { database: 'fke', sql: `INSERT INTO posts(author, title) VALUES (1, 'c${i}')` })),
    ]);
    assert.equal(e!.status, 200, e!.text);
    const [posts, liked] = await children('fke');
    assert.equal(liked, 1);
    assert.ok(posts === 5, `every post stays: ${posts}`);
    const orphan = await q.db('web', 'execute', { database: 'fke', statements: [{ sql: 'PRAGMA foreign_keys = OFF' }, { sql: 'INSERT INTO posts(author) VALUES (42)' }] });
    assert.equal(orphan.status, 409, 'with foreign keys off every key is still checked before COMMIT');
  });

  test('a DEFERRABLE INITIALLY DEFERRED foreign key broken by one write fails that write alone, not the writes committed with it (it used to fail the whole group commit)', async () => {
    const db = 'deferred';
    assert.equal((await q.db('web', 'execute', { database: db, statements: [{ sql: 'CREATE TABLE a(id INTEGER PRIMARY KEY)' }, { sql: 'CREATE TABLE b(id INTEGER PRIMARY KEY, a INTEGER REFERENCES a(id) DEFERRABLE INITIALLY DEFERRED)' }, { sql: 'CREATE TABLE c(x)' }] })).status, 200);
    // A slow write holds the database's lane, so the writes sent meanwhile commit together, as one group.
    const slow = q.db('web', 'execute', { database: db, sql: 'WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 200000) INSERT INTO c SELECT i FROM r' });
    await new Promise((r) => setTimeout(r, 30));
    const [before, broken, after] = await Promise.all([
      q.db('web', 'execute', { database: db, sql: 'INSERT INTO c VALUES (-1)' }),
      q.db('web', 'execute', { database: db, statements: [{ sql: 'INSERT INTO a VALUES (1)' }, { sql: 'INSERT INTO b VALUES (1, 99)' }] }),
      q.db('web', 'execute', { database: db, sql: 'INSERT INTO c VALUES (-2)' }),
    ]);
    assert.equal((await slow).status, 200);
    assert.equal(before!.status, 200, before!.text);
    assert.equal(after!.status, 200, after!.text);
    assert.equal(broken!.status, 409, broken!.text);
    assert.equal(broken!.json.error.code, 'constraint_violation');
    assert.equal(broken!.json.error.details.sqliteCode, 'SQLITE_CONSTRAINT_FOREIGNKEY');
    assert.equal(broken!.json.error.details.statement, 1, 'checked when the request ended: its last statement is named');
    assert.match(broken!.json.error.message, /deferred foreign key/);
    const rows = await q.db('web', 'query', { database: db, sql: 'SELECT (SELECT group_concat(x) FROM (SELECT x FROM c WHERE x < 0 ORDER BY x)), (SELECT count(*) FROM a), (SELECT count(*) FROM b)' });
    assert.deepEqual(rows.json.results[0].rows[0], ['-2,-1', 0, 0], 'its neighbours committed; nothing of it stayed');
  });

  test('a write whose conflict resolution rolls back the transaction (INSERT OR ROLLBACK, RAISE(ROLLBACK)) fails alone, not the writes committed with it (they all got its 409)', async () => {
    const db = 'rollback';
    assert.equal((await q.db('web', 'execute', { database: db, statements: [{ sql: 'CREATE TABLE u(id INTEGER PRIMARY KEY, name TEXT UNIQUE)' }, { sql: "INSERT INTO u(name) VALUES ('taken')" }, { sql: 'CREATE TABLE c(x)' }, { sql: "CREATE TRIGGER no_boom BEFORE INSERT ON u WHEN new.name = 'boom' BEGIN SELECT RAISE(ROLLBACK, 'no boom'); END" }] })).status, 200);
    for (const [sql, message] of [["INSERT OR ROLLBACK INTO u(name) VALUES ('taken')", /UNIQUE constraint failed: u\.name/], ["INSERT INTO u(name) VALUES ('boom')", /no boom/]] as const) {
      // A slow write holds the database's lane, so the writes sent meanwhile commit together, as one group.
      const slow = q.db('web', 'execute', { database: db, sql: 'WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 200000) INSERT INTO c SELECT -i FROM r' });
      await new Promise((r) => setTimeout(r, 30));
      const [before, broken, after] = await Promise.all([
        q.db('web', 'execute', { database: db, sql: 'INSERT INTO c VALUES (1)' }),
        q.db('web', 'execute', { database: db, statements: [{ sql: 'INSERT INTO c VALUES (2)' }, { sql }] }),
        q.db('web', 'execute', { database: db, sql: 'INSERT INTO c VALUES (3)' }),
      ]);
      assert.equal((await slow).status, 200);
      assert.equal(before!.status, 200, `${sql}: ${before!.text}`);
      assert.equal(after!.status, 200, `${sql}: ${after!.text}`);
      assert.equal(broken!.status, 409, broken!.text);
      assert.match(broken!.json.error.message, message);
      assert.equal(broken!.json.error.details.statement, 1);
      const rows = await q.db('web', 'query', { database: db, sql: 'SELECT group_concat(x) FROM (SELECT x FROM c WHERE x > 0 ORDER BY x)' });
      assert.deepEqual(rows.json.results[0].rows[0], ['1,3'], `${sql}: its neighbours committed, nothing of it stayed`);
      assert.equal((await q.db('web', 'execute', { database: db, sql: 'DELETE FROM c' })).status, 200);
    }
  });

  test('a migration that leaves a broken foreign key fails at its end, and a dry run fails exactly where the real run would', async () => {
    const breaking = { id: '0002_break', sql: 'PRAGMA foreign_keys=OFF;\nDELETE FROM authors;\nPRAGMA foreign_keys=ON;' };
    const all = [init, rebuild, breaking];
    for (const dryRun of [true, false]) {
      const r = await q.db('web', 'migrate', { dryRun, migrations: all });
      assert.equal(r.status, 409, `dryRun ${dryRun}: ${r.text}`);
      assert.equal(r.json.error.code, 'constraint_violation');
      assert.equal(r.json.error.details.migration, '0002_break');
    }
    assert.equal((await q.db('web', 'query', { sql: 'SELECT count(*) FROM authors' })).json.results[0].rows[0][0], 1, 'nothing of it stayed');
  });

  test('through execute: write rows of a table, then drop or rename it, in one request; defer_foreign_keys is accepted', async () => {
    await q.db('web', 'execute', { statements: [{ sql: 'CREATE TABLE t3(x)' }, { sql: 'INSERT INTO t3 VALUES (1)' }] });
    const drop = await q.db('web', 'execute', { statements: [{ sql: 'DELETE FROM t3' }, { sql: 'DROP TABLE t3' }] });
    assert.equal(drop.status, 200, drop.text);
    assert.equal(drop.json.results[1].rowsAffected, 0, 'DROP TABLE is DDL');
    const rename = await q.db('web', 'execute', { statements: [{ sql: 'CREATE TABLE a1(x)' }, { sql: 'INSERT INTO a1 VALUES (1)' }, { sql: 'ALTER TABLE a1 RENAME TO a2' }] });
    assert.equal(rename.status, 200, rename.text);
    const deferred = await q.db('web', 'execute', { statements: [{ sql: 'PRAGMA defer_foreign_keys = ON' }, { sql: "INSERT INTO books VALUES (3, 7, 'later')" }, { sql: "INSERT INTO authors(id, name) VALUES (7, 'Later')" }] });
    assert.equal(deferred.status, 200, deferred.text);
    const broken = await q.db('web', 'execute', { statements: [{ sql: 'PRAGMA foreign_keys = OFF' }, { sql: "INSERT INTO books VALUES (4, 8, 'never')" }] });
    assert.equal(broken.status, 409, 'checked at the end of the request');
    assert.equal(broken.json.error.details.sqliteCode, 'SQLITE_CONSTRAINT_FOREIGNKEY');
    assert.deepEqual([broken.json.error.details.statement, broken.json.error.details.atCommit], [1, true], 'it names the last statement, as a deferred key\'s failure does');
    const inMigration = await q.db('web', 'migrate', { database: 'txmig', migrations: [{ id: '9_tx', sql: 'BEGIN;\nCREATE TABLE z(x);\nCOMMIT;' }] });
    assert.equal(inMigration.status, 400, inMigration.text);
    assert.match(inMigration.json.error.message, /transaction control .* is not allowed/, 'the sandbox says what it refused (it said only "the sandbox refused this statement")');
    const after = await q.db('web', 'execute', { sql: "INSERT INTO books VALUES (5, 99, 'x')" });
    assert.equal(after.status, 409, 'the next request checks immediately again');
  });
});
