// The fuzz's mirror lane: the reference mirror's own endpoints (MIRROR_PORT). A recorder, configured as a second
// mirror with the reference mirror's secret, captures the product's real, signed deliveries; the lane sends them
// on to the reference mirror again — as they were (a replay), or changed: bad signature, stale or future
// timestamp, another secret, a webhook-id that is not the event's, no headers, a malformed payload or changeset
// (signed), a version far ahead (signed), a forged event for a scope that does not exist (signed) — and hostile
// requests (any path, method, bytes), and reads (`POST /{repo}/_db/query`, minVersion, hosts, secrets). What must
// hold besides SPEC 3: a delivery whose signature or timestamp is wrong is 401 `unauthorized`; an exact replay is
// 200. At the end (bench/soak/converge.ts) every database the product delivered is read from the primary and from
// the mirror's replica: equal row by row, so no hostile delivery corrupted a replica.
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import { errorCode, type Reply, type Req } from './judge.ts';
import type { SoakDb } from '../soak/converge.ts';

export interface Delivery { body: string; headers: Record<string, string> }
export interface Recorder { url: string; deliveries: Delivery[]; scopes: Map<string, SoakDb>; close(): void }

/** A mirror that acknowledges everything and keeps the last 2,000 deliveries and every scope it heard of. */
export async function startRecorder(): Promise<Recorder> {
  const deliveries: Delivery[] = [];
  const scopes = new Map<string, SoakDb>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      const headers: Record<string, string> = {};
      for (const h of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) headers[h] = String(req.headers[h] ?? '');
      deliveries.push({ body, headers });
      if (deliveries.length > 2_000) deliveries.splice(0, 1_000);
      try {
        const e = JSON.parse(body) as SoakDb;
        scopes.set(`${e.org}/${e.repo}/${e.database}`, { org: e.org, repo: e.repo, database: e.database });
      } catch { /* the product only sends JSON */ }
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/events`, deliveries, scopes, close: () => server.close() };
}

const CHANGES = ['as-is', 'bad-signature', 'stale', 'future', 'wrong-secret', 'id-mismatch', 'no-headers', 'payload', 'changeset', 'ahead', 'forged'] as const;
type Change = (typeof CHANGES)[number];
const SIGNATURE_REFUSED: ReadonlySet<Change> = new Set(['bad-signature', 'stale', 'future', 'wrong-secret', 'no-headers']);
export interface MirrorReq extends Req { change: Change | 'hostile' | 'read' }

const FIELDS = ['type', 'id', 'org', 'repo', 'database', 'version', 'previousVersion', 'changeset', 'changes', 'migrations'];

/** Generated requests to the reference mirror; deliveries are built at send time from what the recorder captured. */
export function mirrorRequest(host: string, secretOf: (repo: string) => string): fc.Arbitrary<{ pick: number; field: string; value: unknown; ahead: number; req: MirrorReq }> {
  // A version far ahead is held by the mirror for its predecessors (2 s) before it heals from a snapshot: rarer.
  const change = fc.oneof({ weight: 20, arbitrary: fc.constantFrom(...CHANGES.filter((c) => c !== 'ahead')) }, { weight: 1, arbitrary: fc.constant('ahead' as const) });
  const delivery = change.map((c): MirrorReq => ({ base: 'mirror', method: 'POST', path: '/hook', headers: { 'content-type': 'application/json' }, change: c }));
  const hostile = fc.record({
    method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'HEAD'),
    path: fc.constantFrom('/hook', '/hook/', '/HOOK', '/', '/_db/status', '/web/_db/execute', '/web/_db/query', '/web/_db/changes', '/%2e%2e/hook', '/web/_db/query/x', '/metrics'),
    body: fc.oneof(fc.string({ maxLength: 200 }), fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)), fc.json(), fc.constant('{"type":"database.changed"')),
    headers: fc.record({ 'webhook-id': fc.string({ maxLength: 30 }), 'webhook-timestamp': fc.oneof(fc.string({ maxLength: 12 }), fc.integer().map(String)), 'webhook-signature': fc.oneof(fc.string({ maxLength: 60 }), fc.constant(`v1,${'A'.repeat(44)}`)), 'content-type': fc.constantFrom('application/json', 'text/plain', 'application/octet-stream') }, { requiredKeys: [] }),
  }).map((h): MirrorReq => ({ base: 'mirror', method: h.method, path: h.path, headers: h.headers as Record<string, string>, ...(h.method === 'GET' || h.method === 'HEAD' ? {} : { body: h.body }), change: 'hostile' }));
  const read = fc.record({
    repo: fc.constantFrom('web', 'other', 'ghost', '..', 'a'.repeat(200), '%2e%2e'),
    auth: fc.constantFrom('right', 'other', 'none', 'garbage'),
    host: fc.constantFrom(host, 'other.localhost', 'localhost', '', 'a..b.localhost'),
    body: fc.record({
      database: fc.constantFrom('main', 'model', 'scratch', 'nope', '../x', ''),
      sql: fc.constantFrom('SELECT 1', 'SELECT * FROM kv', 'SELECT * FROM sqlite_schema', 'INSERT INTO kv(v) VALUES (1)', 'DELETE FROM kv', 'ATTACH \'/etc/passwd\' AS p', 'SELECT * FROM _scopebase_meta', 'PRAGMA writable_schema=1', "SELECT '", 'WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c'),
      // Mostly one every replica has (or not a version); rarely one it may not reach: a 5-s wait, then 503.
      minVersion: fc.option(fc.oneof({ weight: 60, arbitrary: fc.integer({ min: -2, max: 0 }) }, { weight: 10, arbitrary: fc.constantFrom('1', 1.5, 1e20, null) }, { weight: 1, arbitrary: fc.constantFrom(1, 10 ** 9) }), { nil: undefined }),
    }, { requiredKeys: ['sql'] }),
  }).map((g): MirrorReq => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (g.host) headers.host = g.host;
    const auth = { right: `Bearer ${secretOf(g.repo)}`, other: `Bearer ${secretOf('other-repo')}`, none: '', garbage: 'Bearer x' }[g.auth]!;
    if (auth) headers.authorization = auth;
    return { base: 'mirror', method: 'POST', path: `/${g.repo}/_db/query`, headers, body: JSON.stringify(g.body), change: 'read' };
  });
  return fc.record({
    pick: fc.nat(), field: fc.constantFrom(...FIELDS), value: fc.oneof(fc.anything(), fc.constantFrom(-1, 0, 2 ** 53, 'database.dropped', '!!notbase64', 'AAAA', null)), ahead: fc.integer({ min: 2, max: 50 }),
    req: fc.oneof({ weight: 5, arbitrary: delivery }, { weight: 2, arbitrary: hostile }, { weight: 3, arbitrary: read }),
  });
}

/** Makes the generated delivery concrete from a captured one; other requests go as generated. */
export function concrete(g: { pick: number; field: string; value: unknown; ahead: number; req: MirrorReq }, captured: Delivery[], secret: string): MirrorReq {
  const r = g.req;
  if (r.change === 'hostile' || r.change === 'read') return r;
  const d = captured.length ? captured[g.pick % captured.length]! : null;
  const change: Change = d ? r.change : 'forged';
  const hook = new Webhook(secret);
  const signed = (body: string, id: string, at = new Date(), by = hook) => ({ ...r, change, body, headers: { ...r.headers, 'webhook-id': id, 'webhook-timestamp': String(Math.floor(at.getTime() / 1000)), 'webhook-signature': by.sign(id, at, body) } });
  const event = d ? JSON.parse(d.body) as Record<string, unknown> : {};
  const id = String(event.id ?? '');
  switch (change) {
    case 'as-is': return { ...r, change, body: d!.body, headers: { ...r.headers, ...d!.headers } };
    case 'bad-signature': return { ...r, change, body: d!.body, headers: { ...r.headers, ...d!.headers, 'webhook-signature': `v1,${randomBytes(32).toString('base64')}` } };
    case 'stale': return signed(d!.body, id, new Date(Date.now() - 10 * 60_000));
    case 'future': return signed(d!.body, id, new Date(Date.now() + 10 * 60_000));
    case 'wrong-secret': return signed(d!.body, id, new Date(), new Webhook(`whsec_${randomBytes(32).toString('base64')}`));
    case 'id-mismatch': return signed(d!.body, `${id}x`);
    case 'no-headers': return { ...r, change, body: d!.body };
    case 'payload': {
      const e = { ...event };
      if (g.value === undefined) delete e[g.field];
      else e[g.field] = g.value;
      return signed(JSON.stringify(e), String(e.id ?? id));
    }
    case 'changeset': return signed(JSON.stringify({ ...event, changeset: randomBytes(g.ahead * 3).toString('base64') }), id);
    case 'ahead': {
      const version = Number(event.version) + g.ahead;
      return signed(JSON.stringify({ ...event, id: `${id}-ahead${g.ahead}`, version, previousVersion: version - 1, changeset: g.ahead % 2 ? null : randomBytes(12).toString('base64') }), `${id}-ahead${g.ahead}`);
    }
    case 'forged': {
      const forged = { type: 'database.changed', id: `evt_forged${g.pick}`, org: 'acme', repo: g.pick % 2 ? 'ghost' : 'web', database: `forged${g.pick % 5}`, version: 1 + (g.pick % 3), previousVersion: g.pick % 3, changeset: null, changes: { rowsAffected: 1, tables: ['t'] } };
      return signed(JSON.stringify(forged), forged.id);
    }
  }
}

/** What the mirror must answer beyond SPEC 3, or null. */
export function judgeMirror(r: MirrorReq, reply: Reply): string | null {
  if (r.change !== 'hostile' && r.change !== 'read' && SIGNATURE_REFUSED.has(r.change) && (reply.status !== 401 || errorCode(reply) !== 'unauthorized')) return `a delivery with ${r.change} answered ${reply.status} ${reply.text.slice(0, 120)}`;
  if (r.change === 'as-is' && reply.status !== 200 && reply.status !== 503) return `an exact replay of a real delivery answered ${reply.status} ${reply.text.slice(0, 120)}`;
  return null;
}
