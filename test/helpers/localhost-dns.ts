// Preloaded (`node --import`) into third-party tools the tests run, such as drizzle-kit: `*.localhost` resolves to
// loopback, as browsers and curl resolve it (RFC 6761) and as a deployment's DNS resolves its org hosts.
import dns from 'node:dns';

type Callback = (err: Error | null, address: string | { address: string; family: number }[], family?: number) => void;
const lookup = dns.lookup;
const local = (host: unknown) => typeof host === 'string' && (host === 'localhost' || host.endsWith('.localhost'));

(dns as { lookup: unknown }).lookup = function (host: string, options: unknown, callback?: Callback) {
  const cb = (typeof options === 'function' ? options : callback) as Callback;
  const opts = (typeof options === 'object' && options !== null ? options : {}) as { all?: boolean };
  if (!local(host)) return (lookup as (...a: unknown[]) => unknown).call(dns, host, options, callback);
  if (opts.all) process.nextTick(cb, null, [{ address: '127.0.0.1', family: 4 }]);
  else process.nextTick(cb, null, '127.0.0.1', 4);
  return {};
};
