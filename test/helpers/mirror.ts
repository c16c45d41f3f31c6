// Test doubles for mirror delivery: an in-memory change feed and a real HTTP receiver on loopback.
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { ChangeEvent, ChangeFeed, Scope } from '../../src/db/contract.ts';
import { ApiError } from '../../src/shared/errors.ts';
import type { Logger } from '../../src/shared/log.ts';
import { createDeliveryEngine, type DeliveryEngine, type DeliveryOptions } from '../../src/mirror/delivery/engine.ts';
import * as m from '../../src/mirror/delivery/metrics.ts';
import type { Product } from './product.ts';

export const scopeOf = (database = 'main', repo = 'web', org = 'acme'): Scope => ({ org, repo, database });
const keyOf = (s: Scope) => `${s.org}/${s.repo}/${s.database}`;

export function newSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

export type EngineOptions = Omit<DeliveryOptions, 'log' | 'metrics'> & { logger: Logger };

/**
 * The delivery engine on the test's own thread, counting on the process's Prometheus registry as the product's
 * delivery thread does through its relay (src/mirror/delivery/threaded.ts).
 */
export function startEngine(opts: EngineOptions): DeliveryEngine {
  const metrics: DeliveryOptions['metrics'] = {
    attempt: (mirror) => m.attempts.inc({ mirror }),
    failure: (mirror, kind) => m.failures.inc({ mirror, kind }),
    delivered: (mirror) => m.delivered.inc({ mirror }),
    skipped: (mirror, events) => m.skipped.inc({ mirror }, events),
    lag: (mirror, seconds) => m.lag.observe(mirror, seconds),
  };
  const engine = createDeliveryEngine({ ...opts, log: opts.logger, metrics });
  const unregister = m.registerLaneSource(function* () {
    const now = Date.now();
    for (const l of engine.lanes()) yield { mirror: l.mirror, ...l.scope, delivered: l.delivered, pending: l.pending(), stalled: l.isStalled(now, opts.stallAfterMs) };
  });
  return { ...engine, close: async () => { await engine.close(); unregister(); } };
}

/** A change feed kept in memory; `commit` plays the db service's role. */
export class MemoryFeed implements ChangeFeed {
  readonly logs = new Map<string, { scope: Scope; events: ChangeEvent[]; keptFrom: number }>();
  private readonly listeners: ((scope: Scope, version: number) => void)[] = [];
  reads = 0;

  commit(scope: Scope, opts: { hint?: boolean } = {}): ChangeEvent {
    const key = keyOf(scope);
    let log = this.logs.get(key);
    if (!log) this.logs.set(key, (log = { scope, events: [], keptFrom: 1 }));
    const version = log.events.length + 1;
    const event: ChangeEvent = {
      id: `evt_${key}_${version}_${randomBytes(4).toString('hex')}`, type: 'database.changed', ...scope, version, previousVersion: version - 1,
      operation: 'execute', committedAt: new Date().toISOString(), changes: { rowsAffected: 1, tables: ['t'] }, changeset: null,
    };
    log.events.push(event);
    if (opts.hint !== false) for (const l of this.listeners) l(scope, version);
    return event;
  }

  /** Drops events up to `version` from what is kept (retention). */
  prune(scope: Scope, version: number): void {
    this.logs.get(keyOf(scope))!.keptFrom = version + 1;
  }

  onCommit(listener: (scope: Scope, version: number) => void): void {
    this.listeners.push(listener);
  }

  async readChanges(scope: Scope, since: number, limit: number) {
    this.reads++;
    const log = this.logs.get(keyOf(scope));
    if (!log) throw new ApiError('database_not_found', 'no such database');
    if (since < log.keptFrom - 1) throw new ApiError('gone', 'past retention');
    return { events: log.events.filter((e) => e.version > since).slice(0, limit), version: log.events.length };
  }

  async currentVersion(scope: Scope) {
    return this.logs.get(keyOf(scope))?.events.length ?? null;
  }

  async *listDatabases(): AsyncIterable<Scope> {
    for (const log of this.logs.values()) yield log.scope;
  }
}

export interface Received {
  headers: IncomingMessage['headers'];
  body: string;
  event: ChangeEvent;
  url: string;
}

export type Behaviour = (req: IncomingMessage, res: ServerResponse, received: Received) => void | Promise<void>;

/** A real mirror endpoint; `behaviour` decides each reply (default 204). Only 2xx replies are recorded in `acked`. */
export class Receiver {
  readonly all: Received[] = [];
  readonly acked: Received[] = [];
  behaviour: Behaviour = (_req, res) => {
    res.writeHead(204).end();
  };
  private server: Server | null = null;
  port = 0;

  async start(port = 0): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const body = Buffer.concat(chunks).toString('utf8');
        let event: ChangeEvent;
        try {
          event = JSON.parse(body);
        } catch {
          event = {} as ChangeEvent;
        }
        const received = { headers: req.headers, body, event, url: req.url ?? '' };
        this.all.push(received);
        res.on('close', () => {
          if (res.headersSent && res.statusCode >= 200 && res.statusCode < 300) this.acked.push(received);
        });
        void this.behaviour(req, res, received);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(port, '127.0.0.1', resolve));
    this.port = (this.server.address() as AddressInfo).port;
    return this;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  async stop(): Promise<void> {
    await closeServer(this.server);
    this.server = null;
  }

  versions(database = 'main', list: Received[] = this.acked): number[] {
    return list.filter((r) => r.event.database === database).map((r) => r.event.version);
  }
}

/** An HTTP proxy in front of `target` that counts the requests by path: what a reference mirror asks of its source. */
export class CountingProxy {
  readonly counts = new Map<string, number>();
  private server: Server | null = null;
  private readonly target: URL;
  url = '';

  constructor(target: string) {
    this.target = new URL(target);
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      this.counts.set(req.url ?? '', this.count(req.url ?? '') + 1);
      const out = httpRequest({ host: this.target.hostname, port: this.target.port, path: req.url, method: req.method, headers: req.headers }, (reply) => {
        res.writeHead(reply.statusCode ?? 502, reply.headers);
        reply.pipe(res);
      });
      out.on('error', () => res.destroy());
      req.pipe(out);
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  count(path: string): number {
    return this.counts.get(path) ?? 0;
  }

  async stop(): Promise<void> {
    await closeServer(this.server);
    this.server = null;
  }
}

/** Closes a test server and every connection it holds (null: nothing to close). */
async function closeServer(server: Server | null): Promise<void> {
  if (!server) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

export async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs = 5000, what = 'condition'): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** scopebase_mirror_change_log_reads_total by where the pages were read, and the budget's trips (a series not yet made is 0). */
export async function changeLogReads(p: Product): Promise<{ thread: number; executor: number; trips: number }> {
  const text = await (await fetch(`${p.running.adminUrl}/metrics`)).text();
  const value = (series: string) => Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
  const count = (by: string) => value(`scopebase_mirror_change_log_reads_total{by="${by}"}`);
  return { thread: count('thread'), executor: count('executor'), trips: value('scopebase_mirror_read_budget_trips_total') };
}


export const range = (from: number, to: number): number[] => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** Same as product.ts's tempDir, without importing the product (these tests run without the db service). */
export function tempDir(prefix = 'scopebase-mirror-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}
