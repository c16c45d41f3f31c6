// The simplest correct server: node:http + node:sqlite in one process, WAL, synchronous=FULL.
// POST /read {"id"} -> {columns, rows} (point read by primary key); POST /insert {"title"} -> one autocommit insert.
// DB path from argv[2] (created and seeded with ROWS rows at start). Prints "listening <port>" when ready.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { DatabaseSync } from 'node:sqlite';
import { INSERT, POINT_READ, ROWS, SCHEMA, seedSql } from './seed.ts';

const path = process.argv[2];
if (!path) throw new Error('usage: simple-sqlite.ts <db path>');
const db = new DatabaseSync(path);
db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000');
const t0 = performance.now();
db.exec(SCHEMA);
db.exec(seedSql(1, ROWS));
process.stderr.write(`seeded ${ROWS} rows in ${Math.round(performance.now() - t0)} ms\n`);

const read = db.prepare(POINT_READ);
read.setReturnArrays(true);
const columns = read.columns().map((c) => c.name);
const insert = db.prepare(INSERT);

function send(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function handle(req: IncomingMessage, res: ServerResponse, raw: string): void {
  let input: { id?: unknown; title?: unknown };
  try { input = JSON.parse(raw); } catch { return send(res, 400, { error: { code: 'invalid_request', message: 'malformed JSON' } }); }
  if (req.url === '/read' && typeof input.id === 'number') {
    return send(res, 200, { columns, rows: read.all(input.id) });
  }
  if (req.url === '/insert' && typeof input.title === 'string') {
    const r = insert.run(input.title);
    return send(res, 200, { rowsAffected: r.changes, lastInsertRowid: r.lastInsertRowid });
  }
  send(res, 404, { error: { code: 'not_found', message: 'POST /read {id} or /insert {title}' } });
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    try { handle(req, res, Buffer.concat(chunks).toString()); } catch (e) { send(res, 500, { error: { code: 'internal', message: (e as Error).message } }); }
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  process.stdout.write(`listening ${(server.address() as { port: number }).port}\n`);
});
process.on('SIGTERM', () => server.close(() => { db.close(); process.exit(0); }));
