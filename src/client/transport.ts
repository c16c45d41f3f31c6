// One POST (a JSON body, or a file for an import). On Node: node:http(s), so Host can be set and `*.localhost` resolves to loopback
// (RFC 6761, as browsers and curl do; Node's resolver does not). Elsewhere, or when given one: fetch.

/** Progress of a file sent or received: bytes so far, and all of them when known. */
export type Progress = (done: number, total: number | null) => void;
/** A file sent as the body, streamed from disk (Node only). */
export interface FileBody { path: string; size: number; onProgress?: Progress }
/** Where a 200 reply's body goes, streamed to disk (Node only); any other reply is read as usual. */
export interface SaveTo { path: string; onProgress?: Progress }

export interface HttpRequest { url: URL; headers: Record<string, string>; body: string | Uint8Array | FileBody; signal: AbortSignal; saveTo?: SaveTo }
/** `saved`: the bytes written to `saveTo` (then `body` and `bytes` are empty). */
export interface HttpReply { status: number; headers: Record<string, string>; body: string; bytes: Uint8Array; saved?: number }

const isFile = (b: HttpRequest['body']): b is FileBody => typeof b === 'object' && !(b instanceof Uint8Array);

/** Raised when no reply came; `sent` is false when the connection never opened (the server saw nothing). */
export class NoReply extends Error {
  readonly sent: boolean;
  readonly causeCode: string | undefined;
  constructor(message: string, sent: boolean, causeCode?: string) {
    super(message);
    this.sent = sent;
    this.causeCode = causeCode;
  }
}

/** Error codes that mean the connection never opened, so the request cannot have reached the server. */
const NOT_CONNECTED = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'EAI_NONAME']);

export function isLoopbackName(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, '');
  return h === 'localhost' || h.endsWith('.localhost');
}

export type Send = (req: HttpRequest) => Promise<HttpReply>;

export function fetchSender(doFetch: typeof fetch): Send {
  return async (req) => {
    if (isFile(req.body) || req.saveTo) throw new TypeError('files are streamed to and from disk on Node only: send bytes instead');
    let res: Response;
    try {
      res = await doFetch(req.url.href, { method: 'POST', headers: req.headers, body: req.body as BodyInit, signal: req.signal });
    } catch (e) {
      if (req.signal.aborted) throw e;
      const code = (e as { cause?: { code?: string } }).cause?.code;
      throw new NoReply((e as Error).message, !NOT_CONNECTED.has(code ?? ''), code);
    }
    const headers: Record<string, string> = {};
    res.headers.forEach((v, k) => (headers[k] = v));
    const bytes = new Uint8Array(await res.arrayBuffer());
    return { status: res.status, headers, body: new TextDecoder().decode(bytes), bytes };
  };
}

type NodeLookup = (host: string, opts: { all?: boolean }, cb: (...args: unknown[]) => void) => void;

export async function nodeSender(): Promise<Send> {
  const [http, https, dns, fs] = await Promise.all([import('node:http'), import('node:https'), import('node:dns'), import('node:fs')]);
  const lookup: NodeLookup = (host, opts, cb) => {
    if (!isLoopbackName(host)) return (dns.lookup as unknown as NodeLookup)(host, opts, cb);
    if (opts.all) cb(null, [{ address: '127.0.0.1', family: 4 }]);
    else cb(null, '127.0.0.1', 4);
  };
  const agents = { http: new http.Agent({ keepAlive: true }), https: new https.Agent({ keepAlive: true }) };
  return (req) => new Promise<HttpReply>((resolve, reject) => {
    const secure = req.url.protocol === 'https:';
    const file = isFile(req.body) ? req.body : null;
    const options = {
      method: 'POST',
      headers: { ...req.headers, 'content-length': String(file ? file.size : Buffer.byteLength(req.body as string | Uint8Array)) },
      signal: req.signal,
      lookup: lookup as never,
      agent: secure ? agents.https : agents.http,
      // TLS checks the name the caller meant, not the Host override.
      ...(secure ? { servername: req.url.hostname } : {}),
    };
    const failed = (e: Error) => reject(req.signal.aborted ? e : new NoReply(e.message, true));
    const r = (secure ? https : http).request(req.url, options, (res) => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
      const status = res.statusCode ?? 0;
      res.on('error', failed);
      if (req.saveTo && status === 200) {
        const { path, onProgress } = req.saveTo;
        const total = headers['content-length'] ? Number(headers['content-length']) : null;
        const out = fs.createWriteStream(path);
        let saved = 0;
        res.on('data', (c: Buffer) => onProgress?.((saved += c.length), total));
        out.on('error', reject);
        out.on('finish', () => resolve({ status, headers, body: '', bytes: new Uint8Array(0), saved }));
        res.pipe(out);
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const bytes = Buffer.concat(chunks);
        resolve({ status, headers, body: bytes.toString('utf8'), bytes });
      });
    });
    r.on('error', (e: Error & { code?: string }) => {
      if (req.signal.aborted) reject(e);
      else reject(new NoReply(e.message, !NOT_CONNECTED.has(e.code ?? ''), e.code));
    });
    if (!file) return void r.end(req.body);
    const source = fs.createReadStream(file.path);
    let sent = 0;
    source.on('data', (c) => file.onProgress?.((sent += c.length), file.size));
    source.on('error', (e) => r.destroy(e));
    source.pipe(r);
  });
}

/** The platform's way to send: node:http on Node, fetch elsewhere. */
export async function defaultSender(): Promise<Send> {
  const isNode = typeof process !== 'undefined' && typeof process.versions?.node === 'string';
  return isNode ? nodeSender() : fetchSender(fetch);
}
