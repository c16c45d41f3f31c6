// One request on a new connection from a chosen loopback address, with acme/web's secret: for tests of what the
// product does per client address (connection caps, WebSocket caps), and a metric read off the admin port.
import { request } from 'node:http';
import { repoSecret } from '../../src/shared/secrets.ts';
import { ROOT_KEY } from './product.ts';

const SECRET = repoSecret(Buffer.from(ROOT_KEY, 'hex'), 'acme', 'web');

export interface Answer { status: number; headers: Record<string, string | string[] | undefined>; json: any } // eslint-disable-line @typescript-eslint/no-explicit-any

/** `json` is the body parsed, or its text when it is not JSON; fails after `timeoutMs`. */
export function askFrom(port: number, path: string, body: unknown, opts: { from?: string; timeoutMs?: number; method?: string } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const req = request({
      host: '127.0.0.1', port, path, method: opts.method ?? (text === undefined ? 'GET' : 'POST'), agent: false, localAddress: opts.from ?? '127.0.0.1',
      headers: { host: `acme.localhost:${port}`, authorization: `Bearer ${SECRET}`, ...(text === undefined ? {} : { 'content-type': 'application/json' }) },
      signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
    }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (data += d));
      res.on('end', () => {
        let json: unknown = data;
        try {
          json = JSON.parse(data);
        } catch { /* not JSON: its text */ }
        resolve({ status: res.statusCode!, headers: res.headers, json });
      });
    });
    req.on('error', reject);
    req.end(text);
  });
}

/** The value of the first /metrics line matching `line`, or NaN. */
export async function metric(adminPort: number, line: RegExp): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  const m = text.split('\n').find((l) => line.test(l));
  return m === undefined ? NaN : Number(m.split(' ').at(-1));
}
