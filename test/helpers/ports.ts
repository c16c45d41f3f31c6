// Free loopback ports for the servers tests and benchmarks start (PORT, ADMIN_PORT, MIRROR_PORT, etcd's, …).
import { createServer } from 'node:net';

// The kernel may hand the same just-closed port to two calls in a row: a product given it as both PORT and
// ADMIN_PORT refuses to start (exit 78). A port handed out once in this process is not handed out again.
const given = new Set<number>();

/** A loopback port nothing listens on right now, and not returned before by this process. */
export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => {
        const { port } = s.address() as { port: number };
        s.close(() => resolve(port));
      });
    });
    if (!given.has(port)) {
      given.add(port);
      return port;
    }
  }
}
