// `node --import scopebase/localhost app.js`: `*.localhost` resolves to loopback in the whole process, as browsers
// and curl resolve it (RFC 6761), so libSQL clients, ORMs and tools (drizzle-kit, Prisma) reach
// `http://acme.localhost:8080/web/_db/` on a developer's machine. Node's resolver asks the system, which often has
// no answer for such names. Only names ending in `.localhost` change; everything else resolves as before.
import dns from 'node:dns';
import { isLoopbackName } from './transport.ts';

type Callback = (err: Error | null, address: string | { address: string; family: number }[], family?: number) => void;
type Lookup = (host: string, options: unknown, callback?: Callback) => unknown;

const systemLookup = dns.lookup as unknown as Lookup;

const loopbackLookup: Lookup = function (host, options, callback) {
  const cb = (typeof options === 'function' ? options : callback) as Callback;
  if (typeof host !== 'string' || !isLoopbackName(host)) return systemLookup.call(dns, host, options, callback);
  const all = typeof options === 'object' && options !== null && (options as { all?: boolean }).all === true;
  if (all) process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }]);
  else process.nextTick(cb, null, '127.0.0.1', 4);
  return {};
};

(dns as unknown as { lookup: Lookup }).lookup = loopbackLookup;
