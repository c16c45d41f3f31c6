// An executor process needed while the server can open no file descriptor (EMFILE: connections flooding a server
// whose MAX_CONNECTIONS is set above what its `ulimit -n` leaves room for). Node then sets up no pipe and reports the
// failed spawn as an 'error' event a tick later; the executor's constructor threw first (reading its pipe) and never
// heard it: unhandled, the event stopped the whole server. Now the spawn is refused and logged, and tried again every
// 200 ms. The test takes every descriptor away at once: `prlimit` lowers the running server's open-files limit to the
// lowest free descriptor, then a slow query on a connection opened before makes the scheduler want a second executor.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readdirSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from './helpers/ports.ts';
import { call, spawnProduct, tempDir, testEnv, ROOT_KEY } from './helpers/product.ts';
import { repoSecret } from '../src/shared/secrets.ts';

const SECRET = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');
const PRLIMIT = ['/usr/bin/prlimit', '/bin/prlimit'].find(existsSync);

/** Sends a query on the keep-alive connection `s`; resolves with the raw answer once its JSON came (or the connection closed). */
function queryOn(s: Socket, port: number, sql: string): Promise<string> {
  const body = JSON.stringify({ sql });
  let got = '';
  return new Promise((resolve) => {
    const onData = (d: Buffer) => {
      got += d;
      if (/\r\n\r\n\{[\s\S]*\}$/.test(got)) done();
    };
    const done = () => {
      s.off('data', onData);
      resolve(got);
    };
    s.on('data', onData);
    s.once('close', done);
    s.write(`POST /web/_db/query HTTP/1.1\r\nHost: acme.localhost:${port}\r\nAuthorization: Bearer ${SECRET}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  });
}

/** The processes `pid` runs: their pid and command line. */
const children = (pid: string) => execFileSync('ps', ['--ppid', pid, '-o', 'pid=,args=']).toString().split('\n').filter(Boolean).map((l) => ({ pid: Number(l.trim().split(' ')[0]), args: l }));
/** How many executor processes `pid` runs. */
const executors = (pid: string) => children(pid).filter((c) => c.args.includes('executor/child.ts')).length;

/** Lowers `pid`'s open-files limit to its lowest free descriptor: it can open none. Returns what puts the limit back. */
function noDescriptors(pid: string): () => void {
  const limit = (value: string) => execFileSync(PRLIMIT!, ['--pid', pid, `--nofile=${value}:`]);
  const before = execFileSync(PRLIMIT!, ['--pid', pid, '--nofile', '--raw', '--noheadings', '--output=SOFT']).toString().trim();
  const open = new Set(readdirSync(`/proc/${pid}/fd`).map(Number));
  let lowestFree = 0;
  while (open.has(lowestFree)) lowestFree++;
  limit(String(lowestFree));
  return () => limit(before);
}

test('a server that can open no file descriptor keeps running when it needs another executor process', { skip: PRLIMIT === undefined && 'no prlimit (util-linux) on this host' }, async () => {
  const port = await freePort();
  const p = await spawnProduct(testEnv(tempDir(), { PORT: String(port), LOG_LEVEL: 'warn', DB_EXECUTORS: '1' }));
  const pid = String(p.child.pid);
  try {
    const exited = once(p.child, 'exit');
    const m = await call(p.url, 'localhost', '/web/_db/migrate', { body: { migrations: [{ id: '1', sql: 'CREATE TABLE t(x)' }] }, headers: { authorization: `Bearer ${SECRET}` } });
    assert.equal(m.status, 200, m.text);
    const s = await new Promise<Socket>((resolve, reject) => connect(port, '127.0.0.1').once('connect', function (this: Socket) { resolve(this); }).once('error', reject));
    s.on('error', () => {});
    assert.match(await queryOn(s, port, 'SELECT 1 AS one'), /^HTTP\/1\.1 200 /, 'premise: the connection is served');
    // Only the one executor left (those spawned while the first write ran retire after 5 s idle): the slow query wants another.
    for (let waited = 0; waited < 20_000 && executors(pid) > 1; waited += 250) await sleep(250);
    assert.equal(executors(pid), 1, 'premise: one executor process');
    const restore = noDescriptors(pid);
    const answer = await queryOn(s, port, 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) SELECT count(*) AS n FROM c');
    const over = await Promise.race([exited.then(([code]) => `exited with ${code}`), sleep(300).then(() => 'alive')]);
    assert.equal(over, 'alive', `the server stopped: ${p.stdout().slice(-600)}`);
    assert.match(answer, /^HTTP\/1\.1 200 /, answer.slice(0, 300));
    assert.match(p.stdout(), /an executor process could not be started: no file descriptor is left/);
    restore();
    s.destroy();
    await sleep(500); // a failed spawn is tried again every 200 ms
    const q = await call(p.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT count(*) AS n FROM t' }, headers: { authorization: `Bearer ${SECRET}` } });
    assert.equal(q.status, 200, q.text);
  } finally {
    p.killAll();
  }
});

// The shell that kills executors left behind by a server killed -9 (reaper.ts) is started again when someone kills
// it: out of descriptors Node gave it no stdin, and reading it threw from the old shell's 'exit' handler.
test('a server that can open no file descriptor keeps running when its executors\' reaper is killed', { skip: PRLIMIT === undefined && 'no prlimit (util-linux) on this host' }, async () => {
  const p = await spawnProduct(testEnv(tempDir(), { LOG_LEVEL: 'warn', DB_EXECUTORS: '1' }));
  const pid = String(p.child.pid);
  try {
    const exited = once(p.child, 'exit');
    const m = await call(p.url, 'localhost', '/web/_db/migrate', { body: { migrations: [{ id: '1', sql: 'CREATE TABLE t(x)' }] }, headers: { authorization: `Bearer ${SECRET}` } });
    assert.equal(m.status, 200, m.text);
    const reaper = children(pid).find((c) => c.args.includes('/bin/sh -c trap'));
    assert.ok(reaper, 'premise: the reaper shell runs');
    const restore = noDescriptors(pid);
    process.kill(reaper.pid, 'SIGKILL');
    const over = await Promise.race([exited.then(([code]) => `exited with ${code}`), sleep(1000).then(() => 'alive')]);
    assert.equal(over, 'alive', `the server stopped: ${p.stdout().slice(-600)}`);
    restore();
    const q = await call(p.url, 'localhost', '/web/_db/query', { body: { sql: 'SELECT count(*) AS n FROM t' }, headers: { authorization: `Bearer ${SECRET}` } });
    assert.equal(q.status, 200, q.text);
  } finally {
    p.killAll();
  }
});
