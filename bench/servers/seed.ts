// The shared data set of every server under test: todos(id, title, done) with ids 1..ROWS.
export const ROWS = 100_000;

export const SCHEMA = 'CREATE TABLE todos (id INTEGER PRIMARY KEY, title TEXT NOT NULL, done INTEGER NOT NULL DEFAULT 0)';

/** One statement that inserts ids from..to (inclusive) with a recursive CTE. */
export function seedSql(from: number, to: number): string {
  return `WITH RECURSIVE c(x) AS (SELECT ${from} UNION ALL SELECT x + 1 FROM c WHERE x < ${to}) ` +
    `INSERT INTO todos (id, title, done) SELECT x, 'todo number ' || x, x % 2 FROM c`;
}

export const POINT_READ = 'SELECT id, title, done FROM todos WHERE id = ?';
export const RANGE_READ = 'SELECT id, title, done FROM todos WHERE id >= ? ORDER BY id LIMIT 10';
export const INSERT = 'INSERT INTO todos (title, done) VALUES (?, 0)';
