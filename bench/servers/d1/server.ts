// Cloudflare D1 running locally in workerd (miniflare): the Worker in ./worker.js with a D1 binding `DB`,
// persisted under argv[2], seeded with the same ROWS rows in batches. Prints "listening <port>" when ready.
import { readFileSync } from 'node:fs';
import { Miniflare } from 'miniflare';
import { ROWS, SCHEMA, seedSql } from '../seed.ts';

const persist = process.argv[2];
if (!persist) throw new Error('usage: d1/server.ts <persist dir>');
const BATCH = 10_000;

const mf = new Miniflare({
  modules: true,
  script: readFileSync(new URL('./worker.js', import.meta.url), 'utf8'),
  scriptPath: new URL('./worker.js', import.meta.url).pathname,
  d1Databases: { DB: 'bench-d1' },
  d1Persist: persist,
  host: '127.0.0.1',
  port: Number(process.env.PORT ?? 0),
  compatibilityDate: '2025-01-01',
});
const url = await mf.ready;

async function exec(sql: string): Promise<void> {
  const res = await fetch(new URL('/exec', url), { method: 'POST', body: JSON.stringify({ sql }) });
  if (!res.ok) throw new Error(`D1 exec failed: ${res.status} ${await res.text()}`);
}

const t0 = performance.now();
await exec(SCHEMA);
for (let from = 1; from <= ROWS; from += BATCH) await exec(seedSql(from, Math.min(ROWS, from + BATCH - 1)));
const seedMs = Math.round(performance.now() - t0);
process.stderr.write(`seeded ${ROWS} rows in D1 in ${seedMs} ms (batches of ${BATCH})\n`);
process.stdout.write(`listening ${url.port} seedMs=${seedMs}\n`);

const stop = () => { mf.dispose().then(() => process.exit(0), () => process.exit(1)); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
