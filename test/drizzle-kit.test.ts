// SPEC 4.10 with drizzle-kit (issue 12): `drizzle-kit push`, `generate` and `migrate` with `dialect: 'turso'`,
// pointed at the real product through the proxy, as a Turso user points them at Turso. drizzle-kit runs as its own
// process; `*.localhost` resolves to loopback in it as it does in browsers (test/helpers/localhost-dns.ts).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { startProduct, tempDir, type Product } from './helpers/product.ts';

const ROOT = resolve(import.meta.dirname, '..');
const DRIZZLE_KIT = join(ROOT, 'node_modules/drizzle-kit/bin.cjs');

const SCHEMA_V1 = `import { integer, sqliteTable, text, index } from 'drizzle-orm/sqlite-core';
export const users = sqliteTable('users', {
  id: integer('id').primaryKey({ autoIncrement: true }),
  email: text('email').notNull().unique(),
  name: text('name'),
}, (t) => [index('users_name').on(t.name)]);
export const posts = sqliteTable('posts', {
  id: integer('id').primaryKey(),
  author: integer('author').references(() => users.id, { onDelete: 'cascade' }),
  title: text('title').notNull(),
});
`;
// v2 changes a column in place (libSQL's ALTER COLUMN … TO in the turso dialect) and adds one.
const SCHEMA_V2 = SCHEMA_V1.replace("name: text('name'),", "name: text('name').notNull().default('anon'),\n  age: integer('age'),");

let p: Product;
let dir: string;

/** Runs drizzle-kit in the project folder against database `db`; resolves its exit code and output. */
function drizzleKit(db: string, ...args: string[]): Promise<{ code: number; out: string }> {
  const env = {
    ...process.env,
    NODE_OPTIONS: `--import ${join(ROOT, 'test/helpers/localhost-dns.ts')}`,
    DK_URL: `http://acme.localhost:${new URL(p.url).port}/web/_db/${db}/`,
    DK_TOKEN: p.secret('acme', 'web'),
  };
  return new Promise((done) => {
    execFile(process.execPath, [DRIZZLE_KIT, ...args], { cwd: dir, env, timeout: 120_000 }, (err, stdout, stderr) => {
      done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr });
    });
  });
}

const schemaOf = async (db: string) => {
  const r = await p.db('web', 'query', { database: db, sql: "SELECT name, sql FROM sqlite_schema WHERE type = 'table' AND name IN ('users', 'posts', '__drizzle_migrations') ORDER BY name" });
  return Object.fromEntries((r.json.results[0].rows as [string, string][]).map(([n, s]) => [n, s]));
};

before(async () => {
  p = await startProduct();
  dir = tempDir('scopebase-drizzle-kit-');
  mkdirSync(dir, { recursive: true });
  symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
  // What docs/clients.md tells a user to write; tablesFilter keeps drizzle-kit away from scopebase's own tables.
  writeFileSync(join(dir, 'drizzle.config.ts'), `export default {
  dialect: 'turso',
  schema: './schema.ts',
  out: './drizzle',
  dbCredentials: { url: process.env.DK_URL, authToken: process.env.DK_TOKEN },
  tablesFilter: ['!_scopebase_*'],
};
`);
});
after(() => p.close());

describe('drizzle-kit (dialect turso)', () => {
  test('push creates the schema, then changes a column in place: rows and their children stay', async () => {
    writeFileSync(join(dir, 'schema.ts'), SCHEMA_V1);
    const first = await drizzleKit('pushed', 'push', '--force');
    assert.equal(first.code, 0, first.out);
    assert.match((await schemaOf('pushed')).users!, /`email` text NOT NULL/);
    const seed = await p.db('web', 'execute', { database: 'pushed', statements: [
      { sql: "INSERT INTO users(email, name) VALUES ('a@x', 'Ann'), ('b@x', 'Bo')" },
      { sql: "INSERT INTO posts(author, title) VALUES (1, 'one'), (2, 'two')" },
    ] });
    assert.equal(seed.status, 200, seed.text);

    writeFileSync(join(dir, 'schema.ts'), SCHEMA_V2);
    const second = await drizzleKit('pushed', 'push', '--force');
    assert.equal(second.code, 0, second.out);
    const schema = await schemaOf('pushed');
    assert.match(schema.users!, /"name" text NOT NULL DEFAULT 'anon'/);
    assert.match(schema.users!, /`age` integer/);
    const rows = await p.db('web', 'query', { database: 'pushed', sql: 'SELECT u.email, u.name, u.age, count(p.id) FROM users u LEFT JOIN posts p ON p.author = u.id GROUP BY u.id ORDER BY u.id' });
    assert.deepEqual(rows.json.results[0].rows, [['a@x', 'Ann', null, 1], ['b@x', 'Bo', null, 1]]);
    const defaulted = await p.db('web', 'execute', { database: 'pushed', statements: [{ sql: "INSERT INTO users(email) VALUES ('c@x')" }, { sql: "SELECT name FROM users WHERE email = 'c@x'" }] });
    assert.deepEqual(defaulted.json.results[1].rows, [['anon']], 'the new DEFAULT applies to later writes');
    const notNull = await p.db('web', 'execute', { database: 'pushed', sql: "INSERT INTO users(email, name) VALUES ('d@x', NULL)" });
    assert.equal(notNull.status, 409, 'and so does the new NOT NULL');

    const again = await drizzleKit('pushed', 'push', '--force');
    assert.equal(again.code, 0, again.out);
    assert.match(again.out, /No changes detected/, 'scopebase\'s own tables are not seen as changes');
  });

  test('generate then migrate: each migration once, recorded in __drizzle_migrations; a rerun applies nothing', async () => {
    writeFileSync(join(dir, 'schema.ts'), SCHEMA_V1);
    assert.equal((await drizzleKit('migrated', 'generate', '--name', 'init')).code, 0);
    const first = await drizzleKit('migrated', 'migrate');
    assert.equal(first.code, 0, first.out);
    await p.db('web', 'execute', { database: 'migrated', sql: "INSERT INTO users(email, name) VALUES ('a@x', 'Ann')" });
    writeFileSync(join(dir, 'schema.ts'), SCHEMA_V2);
    const generated = await drizzleKit('migrated', 'generate', '--name', 'v2');
    assert.equal(generated.code, 0, generated.out);
    const second = await drizzleKit('migrated', 'migrate');
    assert.equal(second.code, 0, second.out);
    assert.match((await schemaOf('migrated')).users!, /"name" text NOT NULL DEFAULT 'anon'/);
    const before = (await p.db('web', 'status', { database: 'migrated' })).json.version;
    const third = await drizzleKit('migrated', 'migrate');
    assert.equal(third.code, 0, third.out);
    assert.equal((await p.db('web', 'status', { database: 'migrated' })).json.version, before, 'nothing was applied again');
    const applied = await p.db('web', 'query', { database: 'migrated', sql: 'SELECT count(*) FROM __drizzle_migrations' });
    assert.equal(applied.json.results[0].rows[0][0], 2);
  });
});
