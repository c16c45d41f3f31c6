// Two tiny mirror receivers for the "writes with two mirrors" workload: every POST gets 204.
// Prints "listening <port1> <port2>" when ready; counts deliveries and prints them on SIGTERM.
import { createServer, type Server } from 'node:http';

let received = 0;
function sink(): Promise<Server> {
  const s = createServer((req, res) => {
    req.resume();
    req.on('end', () => { received++; res.writeHead(204).end(); });
  });
  s.keepAliveTimeout = 60_000;
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve(s)));
}
const servers = [await sink(), await sink()];
process.stdout.write(`listening ${servers.map((s) => (s.address() as { port: number }).port).join(' ')}\n`);
process.on('SIGTERM', () => {
  process.stdout.write(`received ${received}\n`);
  process.exit(0);
});
