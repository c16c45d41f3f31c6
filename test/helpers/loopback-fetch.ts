// A `fetch` for third-party clients in tests (@libsql/client, Prisma's adapter): Node does not resolve *.localhost, so
// every request connects to loopback while the URL keeps the org's host (as browsers and curl treat *.localhost).
import { Agent, fetch as undiciFetch } from 'undici';

const loopback = new Agent({ connect: { lookup: (_host, _opts, cb) => cb(null, [{ address: '127.0.0.1', family: 4 }]) } });

export const viaLoopback = (async (input: string | URL | Request, init?: RequestInit) => {
  const r = new Request(input, init);
  const body = r.method === 'GET' ? undefined : Buffer.from(await r.arrayBuffer());
  return undiciFetch(r.url, { method: r.method, headers: [...r.headers], body, dispatcher: loopback });
}) as unknown as typeof fetch;
