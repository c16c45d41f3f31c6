// A write group whose reply is lost after one of its requests committed, built deterministically through the product
// (test/db-group-lost-reply.test.ts): a libSQL transaction holds the database's writes, so the four sent meanwhile run
// as one group in the order sent; the third breaks a deferred foreign key at COMMIT, so each runs again alone under
// the group's token, the first commits, and the fourth (quick in the group, endless alone) is stopped at the limit.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createClient } from '@libsql/client';
import { viaLoopback } from './loopback-fetch.ts';
import type { HttpResult, Product } from './product.ts';
import { pause } from './runaway.ts';

/** What the product runs the group under: a limit the runaway reaches soon, and no refusal while the group lines up. */
export const LOST_GROUP_ENV = { DB_QUERY_TIMEOUT_MS: '1500', DB_QUEUE_TIMEOUT_MS: '30000' };

/** Quick while the group's b row is there; endless once it runs alone (the row was the failing request's). */
const RUNAWAY_ALONE = 'INSERT INTO c SELECT CASE WHEN EXISTS (SELECT 1 FROM b) THEN 3 ELSE (WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r) END';

/** The tables the group writes (version 1). */
export async function prepareLostGroup(p: Product, database: string): Promise<void> {
  const setup = await p.db('web', 'execute', {
    database,
    statements: [
      { sql: 'CREATE TABLE a(id INTEGER PRIMARY KEY)' },
      { sql: 'CREATE TABLE b(id INTEGER PRIMARY KEY, a INTEGER REFERENCES a(id) DEFERRABLE INITIALLY DEFERRED)' },
      { sql: 'CREATE TABLE c(x INTEGER PRIMARY KEY)' }, // keyed: a change its changeset carries does not end the group
      { sql: 'INSERT INTO a VALUES (5)' },
    ],
  });
  assert.equal(setup.status, 200, setup.text);
}

/**
 * Sends the group; answers, in order: the write that committed (version 2) and whose reply was lost, a 409 in the group
 * and alone, the one that broke the deferred key, the runaway.
 */
export async function loseGroupReply(p: Product, database: string): Promise<HttpResult[]> {
  const c = createClient({ url: `http://acme.localhost:${new URL(p.url).port}/web/_db/${database}/`, authToken: p.secret('acme', 'web'), fetch: viaLoopback });
  try {
    const tx = await c.transaction('write');
    await tx.execute('SELECT 1'); // BEGIN is sent: the database's writes wait behind it
    const sent: Promise<HttpResult>[] = [];
    for (const statements of [
      [{ sql: 'INSERT INTO c VALUES (1)' }], // commits alone
      [{ sql: 'INSERT INTO c VALUES (2)' }, { sql: 'INSERT INTO a VALUES (5)' }], // 409 in the group and alone
      [{ sql: 'INSERT INTO b VALUES (1, 99)' }], // breaks the deferred key: the group's COMMIT fails
      [{ sql: RUNAWAY_ALONE }], // stopped at the time limit when it runs alone
    ]) {
      sent.push(p.db('web', 'execute', { database, statements }));
      await pause(200); // each reaches the lane before the next: the group runs them in this order
    }
    await tx.rollback();
    return await Promise.all(sent);
  } finally {
    c.close();
  }
}

/**
 * Kills the executors `pids` the moment the database at `path` reaches `version`: a watcher process polls the file,
 * so the kill falls between the interactive COMMIT and its reply (the history of the commit's 24 MB is written then).
 */
export function killAtVersion(path: string, version: number, pids: number[]): ChildProcess {
  const watcher = `
    const { DatabaseSync } = require('node:sqlite');
    const db = new DatabaseSync(${JSON.stringify(path)}, { readOnly: true, timeout: 1000 });
    const read = db.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'");
    for (const until = Date.now() + 20000; Date.now() < until;) {
      if (Number(read.get().value) >= ${version}) {
        for (const pid of ${JSON.stringify(pids)}) try { process.kill(pid, 'SIGKILL'); } catch {}
        break;
      }
    }`;
  return spawn(process.execPath, ['-e', watcher], { stdio: 'ignore' });
}
