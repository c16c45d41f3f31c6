// The servers under test, each started as its own child process (a "setup" is shared by the workloads that use it).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { startServer, type Server } from './lib/proc.ts';
import { seed, startInstance, type Instance } from './scopebase/instance.ts';

export interface Running {
  /** Root pids of the process trees whose CPU is "the server's". */
  pids: number[];
  url: string;
  instance?: Instance;
  /** The database control service's own URL (split mode). */
  dbUrl?: string | null;
  /** The mirror sink's base URL (its /_bench/* control endpoints), for the mirror workloads. */
  sinkUrl?: string;
  notes: Record<string, unknown>;
  stop(): Promise<void>;
}

export interface Setup {
  name: string;
  /** An optional setup (the product, the peer) that fails to start reports its workloads "unavailable"; a baseline that fails is a failure. */
  optional: boolean;
  /** Without a server (engine, memory): workloads run their own process. */
  none?: boolean;
  start(): Promise<Running>;
}

const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const LISTENING = /listening (\d+)(?: seedMs=(\d+))?/;

function tempDir(prefix: string): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

function plain(s: Server, remove: () => void, notes: Record<string, unknown> = {}): Running {
  return { pids: [s.pid], url: `http://127.0.0.1:${s.match[1]}`, notes, async stop() { await s.stop(); remove(); } };
}

async function scopebase(mode: 'one' | 'split', env?: Record<string, string>, rows?: number): Promise<Running> {
  const inst = await startInstance({ mode, env });
  try {
    const seeded = await seed(inst, rows);
    return {
      pids: inst.pids, url: inst.proxyUrl, instance: inst, dbUrl: inst.dbUrl,
      notes: { seedMs: Math.round(seeded.ms), seededWith: seeded.how }, stop: () => inst.stop(),
    };
  } catch (e) {
    await inst.stop();
    throw e;
  }
}

export const SETUPS: Record<string, Setup> = {
  floor: {
    name: 'floor', optional: false,
    async start() {
      const s = await startServer({ name: 'floor', args: [here('./servers/floor.ts')], ready: LISTENING });
      return plain(s, () => {});
    },
  },
  simple: {
    name: 'simple', optional: false,
    async start() {
      const t = tempDir('bench-simple-');
      const s = await startServer({ name: 'simple-sqlite', args: [here('./servers/simple-sqlite.ts'), join(t.dir, 'simple.db')], ready: LISTENING })
        .catch((e) => { t.remove(); throw e; });
      return plain(s, t.remove);
    },
  },
  d1: {
    name: 'd1', optional: true,
    async start() {
      const t = tempDir('bench-d1-');
      const s = await startServer({ name: 'd1 (miniflare)', args: [here('./servers/d1/server.ts'), t.dir], ready: LISTENING, timeoutMs: 120_000 })
        .catch((e) => { t.remove(); throw e; });
      return plain(s, t.remove, { seedMs: Number(s.match[2]), seededWith: 'recursive CTE, 10k rows per batch' });
    },
  },
  engine: { name: 'engine', optional: false, none: true, start: noServer },
  memory: { name: 'memory', optional: true, none: true, start: noServer },
  'sb-one': { name: 'sb-one', optional: true, start: () => scopebase('one') },
  'sb-split': { name: 'sb-split', optional: true, start: () => scopebase('split') },
  'sb-mirrors': {
    name: 'sb-mirrors', optional: true,
    async start() {
      const sink = await startServer({ name: 'mirror sink', args: [here('./servers/mirror-sink.ts')], ready: /listening (\d+) (\d+)/ });
      const mirrors = [1, 2].map((i) => ({ name: `m${i}`, url: `http://127.0.0.1:${sink.match[i]}/hook`, secret: `whsec_${randomBytes(32).toString('base64')}` }));
      try {
        const running = await scopebase('one', { DB_MIRRORS: JSON.stringify(mirrors) }, 0);
        return { ...running, sinkUrl: `http://127.0.0.1:${sink.match[1]}`, async stop() { await running.stop(); await sink.stop(); running.notes.mirrorDeliveries = /received (\d+)/.exec(sink.output())?.[1]; } };
      } catch (e) {
        await sink.stop();
        throw e;
      }
    },
  },
};

async function noServer(): Promise<Running> {
  return { pids: [], url: '', notes: {}, stop: async () => {} };
}
