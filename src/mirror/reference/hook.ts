// POST /hook: Standard Webhooks signature first (nothing unverified is parsed further), then apply in order.
import type { FastifyInstance } from 'fastify';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { ApiError } from '../../shared/errors.ts';
import { malformedJson } from '../../shared/http.ts';
import { parseEvent } from './event.ts';
import type { ReplicaSet } from './replicas.ts';

export function registerHook(app: FastifyInstance, secret: string, replicas: ReplicaSet): void {
  const webhook = new Webhook(secret);
  app.post('/hook', async (req) => {
    const body = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const headers: Record<string, string> = {};
    for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
      const v = req.headers[name];
      if (typeof v === 'string') headers[name] = v;
    }
    let verified: unknown;
    try {
      // Checks the HMAC and that the timestamp is within 5 minutes (replays of old deliveries are refused).
      verified = webhook.verify(body, headers);
    } catch (e) {
      // The library parses the payload after the HMAC passed: a signed body that is not JSON is a bad request, not a
      // wrong secret (SPEC 3).
      if (!(e instanceof WebhookVerificationError)) throw malformedJson();
      throw new ApiError('unauthorized', `webhook signature refused: ${e.message}`);
    }
    const event = parseEvent(verified);
    if (headers['webhook-id'] !== event.id) throw new ApiError('invalid_request', 'webhook-id does not match the event id');
    const outcome = await replicas.receive(event);
    return { outcome, version: replicas.version(event) };
  });
}
