// A mirror for bench/faults.ts that can stop answering: in 'hang' mode it accepts connections, reads the request and
// never replies (its own request timeout is off, so it never sends even a 408); in 'answer' mode it acknowledges
// each event with 204 and records which versions of which database it got.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';

export interface FaultMirror {
  url: string;
  mode: 'answer' | 'hang';
  /** database → versions acknowledged (at least once). */
  received: Map<string, Set<number>>;
  /** Requests left unanswered so far. */
  hung: number;
  close(): Promise<void>;
}

export async function startFaultMirror(): Promise<FaultMirror> {
  const held: ServerResponse[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (mirror.mode === 'hang') {
        mirror.hung++;
        held.push(res); // kept until the product gives up on it (its per-attempt timeout) or the end
        return;
      }
      const event = JSON.parse(Buffer.concat(chunks).toString()) as { database: string; version: number };
      let got = mirror.received.get(event.database);
      if (!got) mirror.received.set(event.database, (got = new Set()));
      got.add(event.version);
      res.writeHead(204).end();
    });
  });
  server.requestTimeout = 0;
  server.headersTimeout = 0;
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const mirror: FaultMirror = {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
    mode: 'answer',
    received: new Map(),
    hung: 0,
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
  return mirror;
}
