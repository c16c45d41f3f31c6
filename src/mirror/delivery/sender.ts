// One signed delivery attempt (Standard Webhooks) over undici: bounded time, bounded response read, no redirects.
import { Agent, request } from 'undici';
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import type { ChangeEvent } from '../../db/contract.ts';
import type { MirrorConfig } from '../../shared/config.ts';

/** At most this much of a mirror's reply is read (for the error message); the rest is discarded with the connection. */
const MAX_REPLY_BYTES = 4096;

export type FailureKind = 'redirect' | 'client_error' | 'server_error' | 'timeout' | 'network' | 'other_status';

export type Outcome = { ok: true; status: number } | { ok: false; kind: FailureKind; error: string };

export interface SendOptions {
  timeoutMs: number;
  /** Aborts every in-flight attempt on shutdown. */
  signal: AbortSignal;
}

/**
 * Signs as Standard Webhooks does (`v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under the decoded
 * whsec secret) with node:crypto: the library's pure-JavaScript SHA-256 cost 4% of the main process under load.
 * The key stays in a KeyObject and never reaches a message.
 */
export class MirrorSender {
  readonly name: string;
  private readonly url: string;
  private readonly key: KeyObject;
  private readonly agent: Agent;

  constructor(mirror: MirrorConfig, agent: Agent) {
    this.name = mirror.name;
    this.url = mirror.url;
    this.key = createSecretKey(Buffer.from(mirror.secret.slice('whsec_'.length), 'base64'));
    this.agent = agent;
  }

  async send(event: ChangeEvent, opts: SendOptions): Promise<Outcome> {
    const body = JSON.stringify(event);
    const timestamp = String(Math.floor(Date.now() / 1000));
    const signature = createHmac('sha256', this.key).update(`${event.id}.${timestamp}.${body}`).digest('base64');
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'scopebase-mirror-delivery',
      'webhook-id': event.id,
      'webhook-timestamp': timestamp,
      'webhook-signature': `v1,${signature}`,
    };
    const timeout = AbortSignal.timeout(opts.timeoutMs);
    const signal = AbortSignal.any([timeout, opts.signal]);
    try {
      const res = await request(this.url, { method: 'POST', headers, body, signal, dispatcher: this.agent, headersTimeout: opts.timeoutMs, bodyTimeout: opts.timeoutMs });
      const reply = await readBounded(res.body);
      if (res.statusCode >= 200 && res.statusCode < 300) return { ok: true, status: res.statusCode };
      return { ok: false, kind: statusKind(res.statusCode), error: describeStatus(res.statusCode, reply) };
    } catch (e) {
      if (timeout.aborted) return { ok: false, kind: 'timeout', error: `no reply within ${opts.timeoutMs} ms` };
      return { ok: false, kind: 'network', error: describeNetworkError(e) };
    }
  }
}

function statusKind(status: number): FailureKind {
  if (status >= 300 && status < 400) return 'redirect';
  if (status >= 400 && status < 500) return 'client_error';
  if (status >= 500) return 'server_error';
  return 'other_status';
}

function describeStatus(status: number, reply: string): string {
  const why = status >= 300 && status < 400 ? ' (redirects are not followed)' : '';
  return reply ? `HTTP ${status}${why}: ${reply}` : `HTTP ${status}${why}`;
}

/** Reads at most MAX_REPLY_BYTES, then drops the stream: a mirror returning gigabytes costs us 4 KiB. */
async function readBounded(body: NodeJS.ReadableStream & { destroy(): void }): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Buffer>) {
    chunks.push(chunk);
    size += chunk.length;
    if (size >= MAX_REPLY_BYTES) {
      body.destroy();
      break;
    }
  }
  const text = Buffer.concat(chunks).subarray(0, 200).toString('utf8');
  // Printable single line only: the reply is the mirror's text, shown in status and logs.
  return text.replace(/[^\x20-\x7e]+/g, ' ').trim();
}

function describeNetworkError(e: unknown): string {
  const err = e as { code?: string; cause?: { code?: string }; name?: string };
  const code = err.code ?? err.cause?.code;
  if (err.name === 'AbortError' || code === 'UND_ERR_ABORTED') return 'aborted (shutting down)';
  // Codes only (ECONNREFUSED, ECONNRESET, ...): messages may carry the URL, which may carry credentials.
  return `connection failed (${code ?? err.name ?? 'unknown error'})`;
}

export function createAgent(timeoutMs: number, connections: number): Agent {
  // undici's request() never follows redirects unless a redirect interceptor is composed in: 3xx stays a failure.
  return new Agent({ connect: { timeout: timeoutMs }, connections, keepAliveTimeout: 10_000 });
}
