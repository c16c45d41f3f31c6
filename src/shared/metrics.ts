// The one Prometheus registry every part registers in (served at /metrics on ADMIN_PORT), and the request metrics
// every listener records: latency per route template (a bounded set: never raw paths, names or ids).
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { OPS } from './db-ops.ts';

export const metrics = new Registry();
collectDefaultMetrics({ register: metrics });

const requestSeconds = new Histogram({
  name: 'scopebase_http_request_duration_seconds',
  help: 'Time to answer an HTTP request, by route template, method and status class',
  labelNames: ['route', 'method', 'status'],
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  registers: [metrics],
});

/** Connections per listener pool (connection-cap.ts): `public` (the proxy or a part's port, the reference mirror) or `admin`. */
export const connectionsOpen = new Gauge({
  name: 'scopebase_connections_open',
  help: 'Open client connections, by pool: public (the proxy or a part\'s own port, and the reference mirror) or admin',
  labelNames: ['pool'],
  registers: [metrics],
});
export const connectionsRefused = new Counter({
  name: 'scopebase_connections_refused_total',
  help: 'Connections refused (503, or closed at once past a few such answers) because every connection under a cap was busy; cap: total (MAX_CONNECTIONS), per_client, or websockets_per_client (an app WebSocket upgrade past MAX_WEBSOCKETS_PER_CLIENT)',
  labelNames: ['pool', 'cap'],
  registers: [metrics],
});
export const connectionsClosedIdle = new Counter({
  name: 'scopebase_connections_closed_idle_total',
  help: 'Idle connections (no request in flight, or an app WebSocket quiet for 5 s at the total) closed to make room for a new one at a cap; cap: total (MAX_CONNECTIONS) or per_client',
  labelNames: ['pool', 'cap'],
  registers: [metrics],
});

const ACCOUNT = new Set(['login', 'callback', 'verify', 'logout', '', 'credentials']);
const ADMIN = new Set(['/healthz', '/readyz', '/metrics', '/_scopebase/openapi.json']);
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);

/** The route template of a request path: `/:repo/_db/query`, `/:repo/_db/pipeline`, `/:repo/_account/login`, `/:repo/*` (an app)… */
export function routeOf(url: string): string {
  const path = url.split('?')[0]!;
  if (ADMIN.has(path)) return path;
  const m = /^\/[^/]+(\/.*)?$/.exec(path);
  if (!m) return 'other';
  const rest = m[1] ?? '';
  const db = /^\/_db\/(.*)$/.exec(rest);
  if (db) {
    if (OPS.has(db[1]!) || db[1] === 'import') return `/:repo/_db/${db[1]}`;
    return /(^|\/)v[23](\/pipeline)?$/.test(db[1]!) ? '/:repo/_db/pipeline' : '/:repo/_db/other';
  }
  const account = /^\/_account(?:\/([^/]*))?/.exec(rest);
  if (account) return ACCOUNT.has(account[1] ?? '') ? `/:repo/_account/${account[1] ?? ''}` : '/:repo/_account/other';
  return '/:repo/*';
}

/** Records one answered request (called with every access-log line, whatever the log level). */
export function observeRequest(method: string | undefined, url: string | undefined, status: number, ms: number): void {
  requestSeconds.observe({ route: routeOf(url ?? ''), method: METHODS.has(method ?? '') ? method! : 'other', status: `${Math.floor(status / 100)}xx` }, ms / 1000);
}
