// The engine alone: node:sqlite in-process point reads and autocommit inserts (WAL, synchronous=FULL), no HTTP.
// Run as a child by bench/run.ts: `node bench/engine.ts <db path> <read|insert> <warmup s> <duration s>`;
// prints one JSON line {rps, p50, p99, mean, total, seconds} (latencies in ms).
import { createHistogram } from 'node:perf_hooks';
import { DatabaseSync } from 'node:sqlite';
import { INSERT, POINT_READ, ROWS, SCHEMA, seedSql } from './servers/seed.ts';

const [path, mode, warmupArg, durationArg] = process.argv.slice(2);
if (!path || (mode !== 'read' && mode !== 'insert')) throw new Error('usage: engine.ts <db path> <read|insert> <warmup s> <duration s>');
const db = new DatabaseSync(path);
db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL');
db.exec(SCHEMA);
db.exec(seedSql(1, ROWS));
const read = db.prepare(POINT_READ);
read.setReturnArrays(true);
const insert = db.prepare(INSERT);
const op = mode === 'read'
  ? () => read.all(1 + Math.floor(Math.random() * ROWS))
  : () => insert.run('a new todo');

function loop(seconds: number, record: boolean) {
  const h = createHistogram();
  const end = performance.now() + seconds * 1000;
  let n = 0;
  const t0 = performance.now();
  while (true) {
    const s = process.hrtime.bigint();
    op();
    if (record) h.record(Math.max(1, Number(process.hrtime.bigint() - s)));
    n++;
    if ((n & 63) === 0 && performance.now() >= end) break;
  }
  const elapsed = (performance.now() - t0) / 1000;
  return { rps: n / elapsed, total: n, seconds: elapsed, p50: h.percentile(50) / 1e6, p99: h.percentile(99) / 1e6, mean: h.mean / 1e6 };
}

loop(Number(warmupArg ?? 1), false);
process.stdout.write(JSON.stringify(loop(Number(durationArg ?? 10), true)) + '\n');
db.close();
