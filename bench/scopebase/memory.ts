// Memory and start-up: touch N distinct databases once (repos r0.. x 50 databases each, as the default
// databases-per-repo limit is 64), read the RSS of the server's process tree, then stop it and time a restart
// until the proxy answers /_db/status for one database.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { http } from '../lib/http.ts';
import { treeRss } from '../lib/proc.ts';
import { Unavailable } from '../lib/unavailable.ts';
import { dbHeaders, startInstance, startOne } from './instance.ts';

export interface MemoryResult {
  databases: number;
  touchSeconds: number;
  touchesPerSecond: number;
  rssIdleBytes: number;
  rssAfterBytes: number;
  stopMs: number;
  /** From spawn to the ready line, and to the first 200 from /_db/status of one database. */
  startupReadyMs: number;
  startupStatusMs: number;
}

const PER_REPO = 50;

export async function runMemory(databases: number, concurrency = 16): Promise<MemoryResult> {
  const dataDir = mkdtempSync(join(tmpdir(), 'scopebase-bench-mem-'));
  try {
    // 16 closed-loop creators keep a queue standing by design: shedding is what `npm run load:tenants` measures.
    const inst = await startInstance({ mode: 'one', dataDir, env: { DB_QUEUE_TARGET_MS: '60000', DB_QUEUE_TIMEOUT_MS: '60000' } }).catch((e: Error) => { throw new Unavailable(e.message); });
    let stopped = false;
    try {
      await new Promise((r) => setTimeout(r, 500));
      const rssIdleBytes = inst.pids.reduce((a, p) => a + treeRss(p), 0);
      const t0 = performance.now();
      let next = 0;
      const worker = async () => {
        while (next < databases) {
          const i = next++;
          const repo = `r${Math.floor(i / PER_REPO)}`;
          const res = await http(`${inst.proxyUrl}/${repo}/_db/execute`, {
            method: 'POST', headers: dbHeaders(inst, repo),
            body: JSON.stringify({ database: `db${i}`, statements: [{ sql: 'CREATE TABLE IF NOT EXISTS t (x)' }, { sql: 'INSERT INTO t (x) VALUES (?)', params: [i] }] }),
          });
          if (res.status !== 200) throw new (i === 0 ? Unavailable : Error)(`touching ${repo}/db${i}: HTTP ${res.status} ${res.body.slice(0, 200)}`);
        }
      };
      await Promise.all(Array.from({ length: concurrency }, worker));
      const touchSeconds = (performance.now() - t0) / 1000;
      await new Promise((r) => setTimeout(r, 1000));
      const rssAfterBytes = inst.pids.reduce((a, p) => a + treeRss(p), 0);

      const s0 = performance.now();
      await inst.stop();
      stopped = true;
      const stopMs = performance.now() - s0;

      const r0 = performance.now();
      const server = await startOne('scopebase restart', inst.env);
      const startupReadyMs = performance.now() - r0;
      try {
        let startupStatusMs = -1;
        while (performance.now() - r0 < 60_000) {
          const res = await http(`${inst.proxyUrl}/r0/_db/status`, { method: 'POST', headers: dbHeaders(inst, 'r0'), body: '{"database":"db0"}' }).catch(() => null);
          if (res?.status === 200) {
            if (!JSON.parse(res.body).exists) throw new Error('after restart, r0/db0 does not exist');
            startupStatusMs = performance.now() - r0;
            break;
          }
          await new Promise((r) => setTimeout(r, 10));
        }
        if (startupStatusMs < 0) throw new Error('no 200 from /_db/status within 60 s of restart');
        return { databases, touchSeconds, touchesPerSecond: databases / touchSeconds, rssIdleBytes, rssAfterBytes, stopMs, startupReadyMs, startupStatusMs };
      } finally {
        await server.stop();
      }
    } finally {
      if (!stopped) await inst.stop();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}
