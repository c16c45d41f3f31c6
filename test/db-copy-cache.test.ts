// An executor's open copies (src/db/executor/copy-ops.ts): a connection found on a file replaced under it is closed
// at once, and closing it leaves the new file's -wal and -shm alone (SQLite sees the file moved: no checkpoint, no
// unlink by name). Before, such connections were kept open for the life of the process, without bound.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readlinkSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { CopyCache } from '../src/db/executor/copy-ops.ts';
import { INTERNAL_SCHEMA } from '../src/db/executor/schema.ts';
import { tempDir } from './helpers/product.ts';
import { openSqlite } from './helpers/sqlite-file.ts';

function makeCopy(path: string, version: number): void {
  const db = openSqlite(path);
  db.exec(`PRAGMA journal_mode=WAL; ${INTERNAL_SCHEMA}`);
  db.prepare("UPDATE _scopebase_meta SET value = ? WHERE key = 'version'").run(version);
  db.close();
}

/** This process's descriptors on a file that was deleted or renamed over. */
const onDeleted = (dir: string) => readdirSync('/proc/self/fd').flatMap((fd) => {
  try {
    const target = readlinkSync(`/proc/self/fd/${fd}`);
    return target.startsWith(dir) && target.endsWith('(deleted)') ? [target] : [];
  } catch {
    return []; // closed meanwhile (the directory listing's own descriptor)
  }
});

test('a copy replaced under an open connection: the connection is closed, the new copy\'s WAL kept', () => {
  const dir = tempDir('scopebase-copy-cache-');
  const path = join(dir, 'main.sqlite');
  const cache = new CopyCache();
  try {
    makeCopy(path, 1);
    assert.deepEqual(cache.state(path), { version: 1, lastEventId: null });
    for (let version = 2; version <= 4; version++) {
      // A snapshot renamed over the copy while another connection (another process's, say) writes the new one.
      makeCopy(`${path}.new`, version);
      for (const suffix of ['', '-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
      renameSync(`${path}.new`, path);
      const writer = openSqlite(path);
      writer.exec("INSERT INTO _scopebase_meta (key, value) VALUES ('note', 'written')");
      assert.deepEqual(cache.state(path), { version, lastEventId: null }, 'read from the new file');
      assert.deepEqual(onDeleted(dir), [], 'no connection is left on a replaced file');
      assert.ok(existsSync(`${path}-wal`) && existsSync(`${path}-shm`), 'the new copy\'s -wal and -shm are where its writer left them');
      writer.close();
      const reader = openSqlite(path, { readOnly: true });
      assert.equal((reader.prepare("SELECT value FROM _scopebase_meta WHERE key = 'note'").get() as { value: string }).value, 'written');
      reader.close();
    }
  } finally {
    cache.closeAll();
    rmSync(dir, { recursive: true, force: true });
  }
});
