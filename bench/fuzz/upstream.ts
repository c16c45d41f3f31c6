// The app behind the proxy for the fuzz's apps lane: a real HTTP server in its own process (forked by bench/fuzz.ts).
// By path it echoes what it received (method, URL, headers, body size) as JSON, answers a chosen status, answers
// slowly, never answers, or resets the connection before or after its headers. Its own replies carry `x-upstream`
// (so the fuzz tells them from the proxy's), an app header and a hop-by-hop one that must not reach the client.
// It also keeps, independently of the replies, every request that reached it carrying a spoofed header (a value with
// the fuzz's marker under an identity, internal, forwarding or hop-by-hop name).
// IPC: sends {port} once listening; on {report: true} sends back {received, spoofed}.
import { createServer } from 'node:http';

export const MARK = 'spoof-';
/** Header names no client's copy may reach an app under (SPEC 8), folded (`_` → `-`, lower case). */
export const NEVER_FROM_CLIENT = /^(x-scopebase-.*|x-auth-user.*|x-auth-request-.*|(x-)?remote-user|x-webauth-.*|x-user|x-user-id|x-original-url|x-rewrite-url|x-email|x-org|x-repo|x-forwarded-.*|forwarded|x-real-ip|proxy-authorization|x-hop|keep-alive|te|trailer|upgrade)$/;
export interface UpstreamReport { received: number; spoofed: string[] }

if (process.send) {
  const report: UpstreamReport = { received: 0, spoofed: [] };
  const server = createServer({ maxHeaderSize: 256 * 1024 }, (req, res) => {
    report.received++;
    for (const [name, value] of Object.entries(req.headers)) {
      if (NEVER_FROM_CLIENT.test(name.replaceAll('_', '-')) && String(value).includes(MARK) && report.spoofed.length < 50) report.spoofed.push(`${req.method} ${req.url}: ${name}: ${String(value).slice(0, 80)}`);
    }
    let bytes = 0;
    req.on('data', (c: Buffer) => { bytes += c.length; });
    req.on('error', () => {});
    req.on('end', () => {
      const path = req.url ?? '/';
      const seg = /^\/([a-z-]+)(?:\/(\d{3}))?/.exec(path);
      const echo = () => JSON.stringify({ method: req.method, url: path, headers: req.headers, bytes });
      const head = (status: number) => ({ 'x-upstream': '1', 'x-app-header': 'kept', connection: 'x-drop-me', 'x-drop-me': 'hop', 'content-type': 'application/json', 'cache-control': 'no-store', ...(status >= 300 && status < 400 ? { location: '/app/elsewhere' } : {}) });
      switch (seg?.[1]) {
        case 'hang': return; // never answers: the proxy's upstream timeout must end it
        case 'reset': req.socket.destroy(); return;
        case 'reset-mid':
          res.writeHead(200, head(200));
          res.write('{"partial":');
          setTimeout(() => req.socket.destroy(), 20);
          return;
        case 'slow': setTimeout(() => res.writeHead(200, head(200)).end(echo()), 50 + Math.floor(Math.random() * 250)); return;
        case 'big': res.writeHead(200, head(200)).end(JSON.stringify({ big: 'b'.repeat(2 * 1024 * 1024) })); return;
        case 'status': {
          const status = Number(seg[2] ?? 200);
          res.writeHead(status, head(status)).end(status === 204 || status === 304 ? undefined : echo());
          return;
        }
        default: res.writeHead(200, head(200)).end(echo());
      }
    });
  });
  server.keepAliveTimeout = 30_000;
  server.listen(0, '127.0.0.1', () => process.send!({ port: (server.address() as { port: number }).port }));
  process.on('message', (m: { report?: boolean }) => {
    if (m.report) process.send!(report);
  });
  process.on('disconnect', () => process.exit(0));
}
