// Two tiny mirror receivers for the mirror workloads: every POST /hook gets 204.
// Prints "listening <port1> <port2>" when ready; counts deliveries and prints them on SIGTERM.
// For the lag workload (bench/lib/lag.ts), either port also answers:
//   POST /_bench/record   forget what was recorded and start recording, per mirror, the arrival time of each version
//   POST /_bench/stop     stop recording
//   GET  /_bench/arrivals {"m1": [[version, arrivedAtMs], ...], "m2": [...]} (first arrival of each version)
// Arrival = the whole body received, as performance.timeOrigin + performance.now() (ms since the epoch, sub-ms,
// comparable with the lag driver's reply times: one machine, one clock). Not recording, a hook body is not even read
// into memory, so the throughput workload's sink costs what it did.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

let received = 0;
let recording = false;
const arrivals = [new Map<number, number>(), new Map<number, number>()];
const now = () => performance.timeOrigin + performance.now();
// The event's own "version" key (not "previousVersion": the quote before the lowercase v tells them apart).
const VERSION = /"version":(\d+)/;

function control(req: IncomingMessage, res: ServerResponse): void {
  req.resume();
  if (req.method === 'POST' && req.url === '/_bench/record') {
    for (const a of arrivals) a.clear();
    recording = true;
  } else if (req.method === 'POST' && req.url === '/_bench/stop') {
    recording = false;
  } else if (req.method === 'GET' && req.url === '/_bench/arrivals') {
    const body = JSON.stringify({ m1: [...arrivals[0]!], m2: [...arrivals[1]!] });
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    return;
  } else {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(204).end();
}

function sink(index: number): Promise<Server> {
  const s = createServer((req, res) => {
    if (req.url?.startsWith('/_bench/')) return control(req, res);
    if (!recording) {
      req.resume();
      req.on('end', () => { received++; res.writeHead(204).end(); });
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const at = now();
      received++;
      const m = VERSION.exec(Buffer.concat(chunks).toString('latin1'));
      const version = m ? Number(m[1]) : NaN;
      if (recording && Number.isSafeInteger(version) && !arrivals[index]!.has(version)) arrivals[index]!.set(version, at);
      res.writeHead(204).end();
    });
  });
  s.keepAliveTimeout = 60_000;
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve(s)));
}
const servers = [await sink(0), await sink(1)];
process.stdout.write(`listening ${servers.map((s) => (s.address() as { port: number }).port).join(' ')}\n`);
process.on('SIGTERM', () => {
  process.stdout.write(`received ${received}\n`);
  process.exit(0);
});
