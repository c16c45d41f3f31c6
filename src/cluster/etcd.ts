// etcd v3 through its JSON gateway (POST /v3/...) over undici: no gRPC stack in the product (src/cluster/DESIGN.md).
import { Counter } from 'prom-client';
import { Pool } from 'undici';
import { metrics } from '../shared/metrics.ts';

/** Every request this process sent to etcd, by call: what a node or proxy costs the etcd every org's leases depend on. */
const calls = new Counter({
  name: 'scopebase_cluster_etcd_requests_total',
  help: 'Requests this process sent to etcd (each endpoint tried counts), by call: range (reads of placement), txn (placement changes, node registration), lease_grant, lease_keepalive, lease_revoke',
  labelNames: ['call'],
  registers: [metrics],
});
const CALL: Record<string, string> = { '/v3/kv/range': 'range', '/v3/kv/txn': 'txn', '/v3/lease/grant': 'lease_grant', '/v3/lease/keepalive': 'lease_keepalive', '/v3/lease/revoke': 'lease_revoke' };

export interface KeyValue {
  key: string;
  value: string;
  modRevision: number;
  lease: string;
}

/** A comparison of a txn: the key absent, or its value / mod revision equal to one given. */
export type Compare = { key: string; absent: true } | { key: string; modRevision: number } | { key: string; value: string };

export type Op = { put: string; value: string; lease?: string } | { delete: string };

const b64 = (s: string) => Buffer.from(s).toString('base64');
const unb64 = (s: string | undefined) => Buffer.from(s ?? '', 'base64').toString('utf8');

/** The first key after every key starting with `prefix` (etcd's range_end for a prefix). */
function prefixEnd(prefix: string): string {
  const b = Buffer.from(prefix);
  b[b.length - 1]! += 1;
  return b.toString('base64');
}

export class EtcdError extends Error {}

export class Etcd {
  private readonly pools: Pool[];
  private next = 0;
  private readonly timeoutMs: number;

  constructor(endpoints: string[], timeoutMs = 2000) {
    this.timeoutMs = timeoutMs;
    if (endpoints.length === 0) throw new EtcdError('no etcd endpoint');
    this.pools = endpoints.map((e) => new Pool(e, { connections: 4, headersTimeout: timeoutMs, bodyTimeout: timeoutMs }));
  }

  /** One call; on a failed endpoint the next one is tried (any member answers linearizably). */
  private async call<T>(path: string, body: unknown): Promise<T> {
    let last: unknown;
    for (let i = 0; i < this.pools.length; i++) {
      const pool = this.pools[(this.next + i) % this.pools.length]!;
      calls.inc({ call: CALL[path] ?? 'other' }); // each endpoint tried: each is a request some etcd member may serve
      try {
        const res = await pool.request({ method: 'POST', path, body: JSON.stringify(body), headers: { 'content-type': 'application/json' }, signal: AbortSignal.timeout(this.timeoutMs) });
        const text = await res.body.text();
        if (res.statusCode !== 200) throw new EtcdError(`etcd ${path}: ${res.statusCode} ${text.slice(0, 200)}`);
        return JSON.parse(text) as T;
      } catch (e) {
        last = e;
        this.next = (this.next + i + 1) % this.pools.length;
      }
    }
    throw last instanceof EtcdError ? last : new EtcdError(`etcd unreachable: ${(last as Error)?.message ?? last}`);
  }

  async grant(ttlS: number): Promise<string> {
    const r = await this.call<{ ID: string; TTL: string }>('/v3/lease/grant', { TTL: ttlS });
    return r.ID;
  }

  /** Renews a lease; false when etcd no longer has it (it expired). */
  async keepAlive(lease: string): Promise<boolean> {
    const r = await this.call<{ result?: { TTL?: string } }>('/v3/lease/keepalive', { ID: lease });
    return Number(r.result?.TTL ?? 0) > 0;
  }

  async revoke(lease: string): Promise<void> {
    await this.call('/v3/lease/revoke', { ID: lease });
  }

  /** Every key under a prefix, and the store's revision they were read at. */
  async prefix(prefix: string): Promise<{ revision: number; kvs: KeyValue[] }> {
    const r = await this.call<{ header: { revision: string }; kvs?: { key: string; value?: string; mod_revision: string; lease?: string }[] }>('/v3/kv/range', { key: b64(prefix), range_end: prefixEnd(prefix) });
    return {
      revision: Number(r.header.revision),
      kvs: (r.kvs ?? []).map((kv) => ({ key: unb64(kv.key), value: unb64(kv.value), modRevision: Number(kv.mod_revision), lease: kv.lease ?? '0' })),
    };
  }

  /** An atomic compare-and-write; `revision` is the store's revision after it (the txn's own when it succeeded). */
  async txn(compare: Compare[], ops: Op[]): Promise<{ succeeded: boolean; revision: number }> {
    const r = await this.call<{ header: { revision: string }; succeeded?: boolean }>('/v3/kv/txn', {
      compare: compare.map((c) => ('absent' in c ? { key: b64(c.key), target: 'VERSION', result: 'EQUAL', version: '0' }
        : 'modRevision' in c ? { key: b64(c.key), target: 'MOD', result: 'EQUAL', mod_revision: String(c.modRevision) }
          : { key: b64(c.key), target: 'VALUE', result: 'EQUAL', value: b64(c.value) })),
      success: ops.map((op) => ('put' in op ? { requestPut: { key: b64(op.put), value: b64(op.value), ...(op.lease ? { lease: op.lease } : {}) } }
        : { requestDeleteRange: { key: b64(op.delete) } })),
    });
    return { succeeded: r.succeeded === true, revision: Number(r.header.revision) };
  }

  async put(key: string, value: string, lease?: string): Promise<number> {
    return (await this.txn([], [{ put: key, value, lease }])).revision;
  }

  async close(): Promise<void> {
    await Promise.all(this.pools.map((p) => p.close()));
  }
}
