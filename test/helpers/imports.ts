// Import helpers shared by the import suites: uploads through the proxy, sample files, reads back.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Product } from './product.ts';
import { openSqlite } from './sqlite-file.ts';

export const SQLITE = 'application/vnd.sqlite3';

export function upload(p: Product, repo: string, query: string, body: Buffer | string, type = SQLITE, secret?: string) {
  return p.call(`/${repo}/_db/import?${query}`, {
    method: 'POST', rawBody: typeof body === 'string' ? Buffer.from(body) : body,
    headers: { authorization: `Bearer ${secret ?? p.secret('acme', repo)}`, 'content-type': type },
  });
}

/** A database file made locally: every table shape, an index, a view, a trigger, full-text search, exact values. */
export function sampleFile(dir: string, extra = ''): { path: string; bytes: Buffer } {
  const path = join(dir, `sample-${Math.random().toString(36).slice(2)}.sqlite`);
  const db = openSqlite(path);
  db.exec(`
    CREATE TABLE todo(id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL, big INTEGER, data BLOB, ratio REAL);
    CREATE TABLE nokey(a, b);
    CREATE TABLE pair(a INTEGER, b TEXT, v, PRIMARY KEY (a, b));
    CREATE TABLE kv(k TEXT PRIMARY KEY, v) WITHOUT ROWID;
    CREATE INDEX todo_title ON todo(title);
    CREATE VIEW titles AS SELECT title FROM todo;
    CREATE TRIGGER stamp AFTER INSERT ON todo BEGIN INSERT INTO nokey VALUES ('trigger', new.id); END;
    CREATE VIRTUAL TABLE docs USING fts5(body);
    INSERT INTO todo(title, big, data, ratio) VALUES ('one', -9223372036854775808, x'00ff0a', 0.1), ('it''s "two"', 9223372036854775807, NULL, 1e300);
    DELETE FROM nokey WHERE b = 1;
    INSERT INTO nokey VALUES (NULL, 'x'), (3.5, x'01');
    INSERT INTO pair VALUES (1, 'a', 'ä'), (1, 'b', NULL);
    INSERT INTO kv VALUES ('k', 'v');
    INSERT INTO docs VALUES ('the quick brown fox'), ('lazy dogs');
    ${extra}
  `);
  db.close();
  return { path, bytes: readFileSync(path) };
}

export async function rowsOf(p: Product, repo: string, sql: string, database = 'main') {
  const r = await p.db(repo, 'query', { database, sql });
  assert.equal(r.status, 200, r.text);
  return r.json.results[0].rows;
}
