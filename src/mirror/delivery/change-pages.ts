// The delivery thread's second way to read a change log: a page read by one of the db service's executors at the
// thread's request over the worker port (threaded.ts answers with DbService.readChangePage's text). Used when reading
// in the thread would parse a large schema or the repo's reads there passed their budget (feed.ts): the executor parses
// it on the tenant's own share of executors, and says how large the schema was (change-log.ts learns it).
import type { ChangeEvent, Scope } from '../../db/contract.ts';
import { ApiError } from '../../shared/errors.ts';
import type { PageAnswer, PageRequest } from './thread-protocol.ts';

/** A page as the executor made it: `schema` is the size of the schema it read with (bytes of SQL, schema cookie). */
export interface ExecutorPage {
  events: ChangeEvent[];
  version: number;
  schema: { bytes: number; cookie: number };
}

interface Waiting {
  resolve(page: ExecutorPage): void;
  reject(e: unknown): void;
}

export class ChangeLogPages {
  private readonly ask: (request: PageRequest) => void;
  private readonly waiting = new Map<number, Waiting>();
  private nextId = 1;
  private closed = false;

  /** `ask` sends a request to the main thread. */
  constructor(ask: (request: PageRequest) => void) {
    this.ask = ask;
  }

  /** The same page as POST /_db/changes serves (one read transaction: committed writes only; `gone` past retention). */
  read(scope: Scope, since: number, limit: number): Promise<ExecutorPage> {
    if (this.closed) return Promise.reject(new Error('mirror delivery is closing'));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.ask({ type: 'read', id, scope: [scope.org, scope.repo, scope.database], since, limit });
    });
  }

  /** The main thread's answer to request `id`. */
  answer(message: PageAnswer): void {
    const waiting = this.waiting.get(message.id);
    if (!waiting) return;
    this.waiting.delete(message.id);
    if ('error' in message) {
      const { code, message: text, details } = message.error;
      waiting.reject(code === null ? new Error(text) : new ApiError(code, text, details));
      return;
    }
    try {
      // Each event's body on the wire is JSON.stringify of it (sender.ts): the text the executor stored, byte for byte.
      waiting.resolve(JSON.parse(Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength).toString('utf8')));
    } catch (e) {
      waiting.reject(e);
    }
  }

  /** Reads still waiting fail now: close() must not wait for a tenant's slow read. */
  close(): void {
    this.closed = true;
    for (const waiting of this.waiting.values()) waiting.reject(new Error('mirror delivery is closing'));
    this.waiting.clear();
  }
}
