// One signed delivery attempt (Standard Webhooks) over undici: bounded time, bounded response read, no redirects.
import { Pool, type Dispatcher } from 'undici';
import { createHmac, createSecretKey, type KeyObject } from 'node:crypto';
import { stripVTControlCharacters } from 'node:util';
import type { ChangeEvent } from '../../db/contract.ts';
import type { MirrorConfig } from '../../shared/config.ts';
import { safeDecode } from '../../shared/names.ts';

/** At most this much of a mirror's reply is read (for the error message); the rest is discarded with the connection. */
const MAX_REPLY_BYTES = 4096;

export type FailureKind = 'redirect' | 'client_error' | 'server_error' | 'timeout' | 'network' | 'other_status';

export type Outcome = { ok: true; status: number } | { ok: false; kind: FailureKind; error: string };

// The wire body of each event, made once for every mirror: the change log's own text when the feed kept it.
const bodies = new WeakMap<ChangeEvent, string>();

/** Records that `text` is `event` as stored (the change log stores JSON.stringify of the event: same bytes). */
export function keepBody(event: ChangeEvent, text: string): ChangeEvent {
  bodies.set(event, text);
  return event;
}

export function eventBody(event: ChangeEvent): string {
  let body = bodies.get(event);
  if (body === undefined) bodies.set(event, (body = JSON.stringify(event)));
  return body;
}

/** Why an attempt was stopped by us rather than by the mirror or the network. */
class Stopped extends Error {
  readonly why: 'timeout' | 'reply_read';
  constructor(why: 'timeout' | 'reply_read') {
    super(why);
    this.why = why;
  }
}

/**
 * Signs as Standard Webhooks does (`v1,` + base64 HMAC-SHA256 of `{id}.{timestamp}.{body}` under the decoded
 * whsec secret) with node:crypto: the library's pure-JavaScript SHA-256 cost 4% of the main process under load.
 * The key stays in a KeyObject and never reaches a message.
 *
 * Each mirror has its own undici Pool, driven through `dispatch` with a plain handler: no response stream, no
 * composed AbortSignal, no promise per chunk. That costs a third of `request()`'s CPU per attempt, and a busy
 * database sends one attempt per event. undici's dispatch never follows redirects: 3xx stays a failure.
 */
export class MirrorSender {
  readonly name: string;
  private readonly path: string;
  /** `Authorization: Basic` from user information in the URL (`https://user:pass@host/hook`), else null. */
  private readonly authorization: string | null;
  private readonly key: KeyObject;
  private readonly pool: Pool;
  private readonly timeoutMs: number;

  constructor(mirror: MirrorConfig, opts: { timeoutMs: number; connections: number }) {
    this.name = mirror.name;
    const url = new URL(mirror.url);
    this.path = url.pathname + url.search;
    // undici sends nothing of a URL's user information: it is turned into Basic credentials, as curl does with it.
    this.authorization = url.username || url.password ? `Basic ${Buffer.from(`${userPart(url.username)}:${userPart(url.password)}`).toString('base64')}` : null;
    this.key = createSecretKey(Buffer.from(mirror.secret.slice('whsec_'.length), 'base64'));
    this.timeoutMs = opts.timeoutMs;
    this.pool = new Pool(url.origin, {
      connections: opts.connections, connect: { timeout: opts.timeoutMs }, keepAliveTimeout: 10_000,
      headersTimeout: opts.timeoutMs, bodyTimeout: opts.timeoutMs,
    });
  }

  send(event: ChangeEvent): Promise<Outcome> {
    const body = eventBody(event);
    const timestamp = String(Math.floor(Date.now() / 1000));
    const signature = createHmac('sha256', this.key).update(`${event.id}.${timestamp}.${body}`).digest('base64');
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'scopebase-mirror-delivery',
      'webhook-id': event.id,
      'webhook-timestamp': timestamp,
      'webhook-signature': `v1,${signature}`,
      ...(this.authorization === null ? {} : { authorization: this.authorization }),
    };
    const timeoutMs = this.timeoutMs;
    return new Promise((resolve) => {
      let controller: Dispatcher.DispatchController | null = null;
      let stopped: Stopped | null = null;
      let status = 0;
      let size = 0;
      const chunks: Buffer[] = [];
      const stop = (why: Stopped) => {
        stopped ??= why;
        controller?.abort(why); // else at onRequestStart
      };
      const timer = setTimeout(() => stop(new Stopped('timeout')), timeoutMs);
      const finish = (outcome: Outcome) => {
        clearTimeout(timer);
        resolve(outcome);
      };
      const answered = () => finish(status >= 200 && status < 300 ? { ok: true, status } : { ok: false, kind: statusKind(status), error: describeStatus(status, replyText(chunks)) });
      this.pool.dispatch({ path: this.path, method: 'POST', headers, body }, {
        onRequestStart(c) {
          controller = c;
          if (stopped) c.abort(stopped);
        },
        onResponseStart(_c, statusCode) {
          status = statusCode;
        },
        onResponseData(c, chunk) {
          chunks.push(chunk);
          size += chunk.length;
          if (size >= MAX_REPLY_BYTES) stop(new Stopped('reply_read')); // the status is known; the rest is not read
        },
        onResponseEnd: answered,
        onResponseError(_c, e) {
          if (stopped?.why === 'reply_read') answered();
          else if (stopped?.why === 'timeout') finish({ ok: false, kind: 'timeout', error: `no reply within ${timeoutMs} ms` });
          else finish({ ok: false, kind: 'network', error: describeNetworkError(e) });
        },
      });
    });
  }

  /** Ends every connection, failing the attempts in flight (shutdown). */
  async close(): Promise<void> {
    await this.pool.destroy();
  }
}

/** A URL's percent-encoded user or password, decoded; a stray `%` stays as it is. */
function userPart(part: string): string {
  return safeDecode(part.replace(/%(?![0-9A-Fa-f]{2})/g, '%25'));
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

/** Printable single line only: the reply is the mirror's text, shown in status and logs. */
function replyText(chunks: Buffer[]): string {
  const text = Buffer.concat(chunks).subarray(0, 200).toString('utf8');
  // Whole escape sequences first: dropping only their ESC left "[31m" and the like in lastError.
  return stripVTControlCharacters(text).replace(/[^\x20-\x7e]+/g, ' ').trim();
}

function describeNetworkError(e: unknown): string {
  const err = e as { code?: string; cause?: { code?: string }; name?: string };
  const code = err.code ?? err.cause?.code;
  if (code === 'UND_ERR_DESTROYED' || code === 'UND_ERR_CLOSED') return 'aborted (shutting down)';
  // Codes only (ECONNREFUSED, ECONNRESET, ...): messages may carry the URL, which may carry credentials.
  return `connection failed (${code ?? err.name ?? 'unknown error'})`;
}
