// SPEC 9: /healthz, /readyz and Prometheus /metrics on ADMIN_PORT, apart from public traffic.
import type { FastifyInstance } from 'fastify';
import { adminConnections } from './connection-cap.ts';
import { createHttpApp } from './http.ts';
import type { Logger } from './log.ts';
import { metrics } from './metrics.ts';
import { registerOwnPaths } from './openapi.ts';

export { metrics };

export interface Readiness {
  /** Null when ready, else why not (starting, draining, a part that is down). */
  notReadyReason(): string | null;
}

export function createAdminServer(logger: Logger, readiness: Readiness): FastifyInstance {
  const app = createHttpApp({ logger: logger.child({ server: 'admin' }), bodyLimit: 1024, connections: adminConnections(logger) });
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    const reason = readiness.notReadyReason();
    if (reason === null) return { status: 'ready' };
    return reply.code(503).header('retry-after', '1').send({ error: { code: 'unavailable', message: reason } });
  });
  registerOwnPaths(app, (req) => {
    const host = req.headers.host ?? '';
    return /^[a-z0-9.:[\]-]+$/i.test(host) ? { admin: `http://${host}` } : {};
  });
  app.get('/metrics', async (_req, reply) => reply.type(metrics.contentType).send(await metrics.metrics()));
  return app;
}
