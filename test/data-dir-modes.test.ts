// Issue 10 item 6: everything the product creates under DATA_DIR is owner-only (0600 files, 0700 directories),
// -wal and -shm files and generated keys included, whatever the umask it was started with.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { call, spawnProduct, tempDir, testEnv } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

function walk(dir: string, out: { path: string; mode: number; dir: boolean }[] = []): typeof out {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    const st = statSync(path);
    out.push({ path, mode: st.mode & 0o777, dir: st.isDirectory() });
    if (st.isDirectory()) walk(path, out);
  }
  return out;
}

test('started with umask 022, the product creates nothing that others may read', async () => {
  const dataDir = join(tempDir(), 'data');
  const env = testEnv(dataDir, {});
  delete env.RUNTIME_ROOT_KEY; // generated into DATA_DIR, as on a fresh `npm start`
  const previous = process.umask(0o022);
  let product;
  try {
    product = await spawnProduct(env);
  } finally {
    process.umask(previous);
  }
  try {
    const { readFileSync } = await import('node:fs');
    const rootKey = Buffer.from(readFileSync(join(dataDir, 'runtime-root.key'), 'utf8').trim(), 'hex');
    for (const repo of ['web', 'docs']) {
      const r = await call(product.url, 'localhost', `/${repo}/_db/execute`, { body: { sql: 'CREATE TABLE t(x)' }, headers: { authorization: `Bearer ${repoSecret(rootKey, 'acme', repo)}` } });
      assert.equal(r.status, 200, r.text);
    }
    const entries = [{ path: dataDir, mode: statSync(dataDir).mode & 0o777, dir: true }, ...walk(dataDir)];
    assert.ok(entries.some((e) => e.path.endsWith('.sqlite-wal')), 'WAL files are there to check');
    for (const e of entries) assert.equal(e.mode & 0o077, 0, `${e.path} is ${e.mode.toString(8)}`);
  } finally {
    product.killAll();
  }
});
