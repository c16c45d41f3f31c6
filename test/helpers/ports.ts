// Free loopback ports for the servers tests and benchmarks start (PORT, ADMIN_PORT, MIRROR_PORT, etcd's, …).
import { createServer } from 'node:net';

// Ports are taken below the kernel's ephemeral range (32768–60999 on Linux): a port from that range, free when asked,
// could be given to one of the many outgoing connections tests make before the server meant for it listens
// (EADDRINUSE). Each process walks its own stretch of the range, starting at a place its pid picks, so the two test
// files run at once do not hand out the same port; a port handed out once in this process is not handed out again.
const LOW = 20000;
const HIGH = 32767;
const SPAN = HIGH - LOW + 1;
let next = (process.pid * 613) % SPAN;
const given = new Set<number>();

const bindable = (port: number) => new Promise<boolean>((resolve) => {
  const s = createServer();
  s.once('error', () => resolve(false));
  s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
});

/** A loopback port nothing listens on right now, and not returned before by this process. */
export async function freePort(): Promise<number> {
  for (let tried = 0; tried < SPAN; tried++) {
    const port = LOW + (next++ % SPAN);
    if (given.has(port) || !(await bindable(port))) continue;
    given.add(port);
    return port;
  }
  throw new Error(`no free loopback port between ${LOW} and ${HIGH}`);
}
