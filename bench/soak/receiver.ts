// A second, non-reference mirror for the soak: a plain webhook receiver in its own process (forked by the script, so
// its CPU is not the load generator's). It verifies every delivery with the `standardwebhooks` library (HMAC and the
// 5-minute timestamp window), refuses a small share with 503 so the product's retries run, and records, per
// database, the event ids and versions it acknowledged, in the order it acknowledged them.
// IPC: it sends {port} once listening; on {report: true} it sends back {events, refused, invalid}.
import { createServer } from 'node:http';
import { Webhook } from 'standardwebhooks';

const secret = process.env.RECEIVER_SECRET;
const refuseShare = Number(process.env.RECEIVER_REFUSE ?? '0.01');
if (!secret || !process.send) throw new Error('run by bench/soak.ts: RECEIVER_SECRET and an IPC channel are required');
const hook = new Webhook(secret);

export interface ReceiverReport {
  /** "org/repo/database" → [event id, version] acknowledged, in order (a re-delivery appears again). */
  events: Record<string, [string, number][]>;
  refused: number;
  /** Refused for a webhook-timestamp more than 5 minutes from this process's clock (the product's clock jumped). */
  stale: number;
  invalid: string[];
}
const report: ReceiverReport = { events: {}, refused: 0, stale: 0, invalid: [] };

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString();
    let event: { id: string; org: string; repo: string; database: string; version: number };
    try {
      event = hook.verify(body, req.headers as Record<string, string>) as typeof event;
    } catch (e) {
      if (/timestamp too (new|old)/.test((e as Error).message)) report.stale++;
      else if (report.invalid.length < 20) report.invalid.push(`${req.headers['webhook-id']}: ${(e as Error).message}`);
      res.writeHead(400).end();
      return;
    }
    if (event.id !== req.headers['webhook-id']) report.invalid.push(`body id ${event.id} ≠ header ${req.headers['webhook-id']}`);
    if (Math.random() < refuseShare) {
      report.refused++;
      res.writeHead(503).end(); // not acknowledged: the product must send it again, before anything later
      return;
    }
    const key = `${event.org}/${event.repo}/${event.database}`;
    (report.events[key] ??= []).push([event.id, event.version]);
    res.writeHead(204).end();
  });
});
server.keepAliveTimeout = 30_000;
server.listen(0, '127.0.0.1', () => process.send!({ port: (server.address() as { port: number }).port }));
process.on('message', (m: { report?: boolean }) => {
  if (m.report) process.send!(report);
});
process.on('disconnect', () => process.exit(0));
