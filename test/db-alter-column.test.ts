// libSQL's ALTER TABLE … ALTER COLUMN … TO … (SPEC 4.10's "libSQL SQL"; docs/database.md), through /_db/execute and
// /_db/migrate of the real product: what changes, what is refused with which message, and that a failure leaves nothing.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';

let p: Product;
const run = (sql: string) => p.db('web', 'execute', { database: 'alter', sql });
const tableSql = async () => (await p.db('web', 'query', { database: 'alter', sql: "SELECT sql FROM sqlite_schema WHERE name = 't'" })).json.results[0].rows[0][0] as string;

before(async () => {
  p = await startProduct();
  const r = await p.db('web', 'execute', { database: 'alter', statements: [
    { sql: 'CREATE TABLE p(id INTEGER PRIMARY KEY)' },
    { sql: 'CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b INTEGER, "c d" TEXT CHECK (length("c d") < 5), e TEXT DEFAULT \'x, (y)\')' },
    { sql: 'CREATE INDEX t_a ON t(a)' },
    { sql: "INSERT INTO t(a, b) VALUES ('one', 5)" },
  ] });
  assert.equal(r.status, 200, r.text);
});
after(() => p.close());

test('a column\'s type, NOT NULL, DEFAULT and CHECK change in place; later writes follow the new definition', async () => {
  const v0 = (await p.db('web', 'status', { database: 'alter' })).json.version;
  const r = await run("ALTER TABLE t ALTER COLUMN a TO a TEXT NOT NULL DEFAULT 'z'");
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.version, v0 + 1, 'one version, like any DDL');
  assert.equal((await run('ALTER TABLE "t" ALTER COLUMN "c d" TO "c d" INTEGER')).status, 200, 'quoted names, and a CHECK dropped');
  assert.equal((await run('ALTER TABLE t ALTER COLUMN b TO b INTEGER CHECK (b < 10)')).status, 200);
  assert.equal(await tableSql(), 'CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT NOT NULL DEFAULT \'z\', b INTEGER CHECK (b < 10), "c d" INTEGER, e TEXT DEFAULT \'x, (y)\')');
  const w = await p.db('web', 'execute', { database: 'alter', statements: [{ sql: "INSERT INTO t(b, \"c d\") VALUES (1, '42')" }, { sql: 'SELECT a, typeof("c d") FROM t WHERE b = 1' }] });
  assert.deepEqual(w.json.results[1].rows, [['z', 'integer']], 'the DEFAULT and the new INTEGER affinity apply');
  assert.equal((await run('INSERT INTO t(a, b) VALUES (NULL, 2)')).status, 409);
  assert.equal((await run('INSERT INTO t(b) VALUES (11)')).json.error.details.sqliteCode, 'SQLITE_CONSTRAINT_CHECK');
  const check = await p.db('web', 'query', { database: 'alter', sql: 'SELECT * FROM pragma_integrity_check' });
  assert.deepEqual(check.json.results[0].rows, [['ok']]);
});

test('existing rows must satisfy the new definition; otherwise nothing changes', async () => {
  await run('INSERT INTO t(a, b, e) VALUES (\'two\', 7, NULL)');
  const before = await tableSql();
  for (const [sql, message] of [
    ['ALTER TABLE t ALTER COLUMN e TO e TEXT NOT NULL', /existing rows break the new definition \(NULL value in t\.e\)/],
    ['ALTER TABLE t ALTER COLUMN b TO b INTEGER CHECK (b < 6)', /CHECK constraint failed in t/],
    ['ALTER TABLE t ALTER COLUMN b TO b INTEGER REFERENCES p(id)', /refer to missing rows of p/],
  ] as const) {
    const r = await run(sql);
    assert.equal(r.status, 409, r.text);
    assert.match(r.json.error.message, message);
  }
  assert.equal(await tableSql(), before);
});

test('what it cannot do is refused with a precise sql_error, and a later failing statement undoes it', async () => {
  for (const [sql, code, message] of [
    ['ALTER TABLE t ALTER COLUMN a TO x TEXT', 'sql_error', /must start with the column's own name \(a\)/],
    ['ALTER TABLE t ALTER COLUMN id TO id TEXT', 'sql_error', /primary key/],
    ['ALTER TABLE t ALTER COLUMN b TO b INTEGER UNIQUE', 'sql_error', /rebuild the table/],
    ['ALTER TABLE t ALTER COLUMN a TO a TEXT COLLATE NOCASE', 'sql_error', /a is indexed/],
    ['ALTER TABLE t ALTER COLUMN e TO e TEXT CHECK (', 'sql_error', /parenthesis .* not closed/],
    ['ALTER TABLE t ALTER COLUMN e TO e TEXT CHECK (e IN)', 'sql_error', /not valid: near "\)"/],
    ['ALTER TABLE nope ALTER COLUMN a TO a', 'sql_error', /no such table: nope/],
    ['ALTER TABLE t ALTER COLUMN zz TO zz INT', 'sql_error', /no such column: t\.zz/],
    ['ALTER TABLE _scopebase_meta ALTER COLUMN value TO value TEXT', 'not_allowed', /internal table/],
    // A definition that would rewrite more than its column: a comment hiding the rest, a second column, junk after.
    ['ALTER TABLE t ALTER COLUMN a TO a TEXT --', 'sql_error', /comments are not allowed/],
    ['ALTER TABLE t ALTER COLUMN b TO b INTEGER /*', 'sql_error', /comments are not allowed/],
    ['ALTER TABLE t ALTER COLUMN a TO a TEXT, z INT', 'sql_error', /one column's/],
    ['ALTER TABLE t ALTER COLUMN e TO e TEXT DEFAULT (1))', 'sql_error', /closes a parenthesis/],
    ["ALTER TABLE t ALTER COLUMN e TO e TEXT DEFAULT 'x", 'sql_error', /quote .* not closed/],
  ] as const) {
    const r = await run(sql);
    assert.equal(r.json.error?.code, code, `${sql}: ${r.text}`);
    assert.match(r.json.error.message, message);
  }
  const before = await tableSql();
  const r = await p.db('web', 'execute', { database: 'alter', statements: [{ sql: 'ALTER TABLE t ALTER COLUMN e TO e BLOB' }, { sql: 'SELECT * FROM nosuch' }] });
  assert.equal(r.status, 400);
  assert.equal(await tableSql(), before, 'the request\'s failure rolled the schema change back');
});

test('in a migration, among other statements', async () => {
  const r = await p.db('web', 'migrate', { database: 'alter', migrations: [{ id: '0001', sql: 'CREATE TABLE m(x TEXT);\n--> statement-breakpoint\nALTER TABLE `m` ALTER COLUMN "x" TO "x" integer DEFAULT 3;\n--> statement-breakpoint\nINSERT INTO m DEFAULT VALUES;' }] });
  assert.equal(r.status, 200, r.text);
  const rows = await p.db('web', 'query', { database: 'alter', sql: 'SELECT x, typeof(x) FROM m' });
  assert.deepEqual(rows.json.results[0].rows, [[3, 'integer']]);
});
