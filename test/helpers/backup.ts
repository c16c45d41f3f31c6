// What the `scopebase backup|restore|verify` tests share: the product with known data to back up (three quiet
// databases with counted rows and a bigger one), and the CLI run on its DATA_DIR.
import assert from 'node:assert/strict';
import { runCli, type Run } from './cli.ts';
import { startProduct, type Product } from './product.ts';

/** The quiet databases: name → (repo, database, rows to write). */
export const QUIET = [
  { repo: 'web', database: 'main', rows: 5 },
  { repo: 'web', database: 'logs', rows: 3 },
  { repo: 'api', database: 'main', rows: 7 },
];
export const key = (repo: string, database: string) => `${repo}/${database}`;

/** One write through the database API; the version it committed. */
export async function write(p: Product, repo: string, database: string, sql: string, params: unknown[] = []): Promise<number> {
  const r = await p.db(repo, 'execute', { database, sql, params });
  assert.equal(r.status, 200, r.text);
  return r.json.version as number;
}

/** The product on `dataDir` with the QUIET databases and a bigger `busy/main`; what each QUIET one committed. */
export async function startWithData(dataDir: string): Promise<{ p: Product; committed: Map<string, { rows: number; version: number }> }> {
  const p = await startProduct({ DATA_DIR: dataDir });
  const committed = new Map<string, { rows: number; version: number }>();
  for (const q of QUIET) {
    await write(p, q.repo, q.database, 'CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)');
    let version = 0;
    for (let i = 0; i < q.rows; i++) version = await write(p, q.repo, q.database, 'INSERT INTO t(v) VALUES (?)', [`${q.repo}-${i}`]);
    committed.set(key(q.repo, q.database), { rows: q.rows, version });
  }
  // A bigger database that keeps being written to while the backup runs.
  await write(p, 'busy', 'main', 'CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)');
  await write(p, 'busy', 'main', 'WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) INSERT INTO t(v) SELECT randomblob(1000) FROM n');
  return { p, committed };
}

/** The CLI on `dataDir()` (the product's DATA_DIR) unless told another. */
export function backupCli(dataDir: () => string): (args: string[], env?: Record<string, string>) => Promise<Run> {
  return (args, env = {}) => runCli(args, { ...process.env, DATA_DIR: dataDir(), ...env });
}
