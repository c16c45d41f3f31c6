// The fuzz's lanes beside its main one: the reference mirror's endpoints (bench/fuzz/mirror.ts) and apps with a real
// app behind the proxy (bench/fuzz/apps.ts). Each takes one request in LANE_EVERY of the run's numbering, generated
// from the run's seed; `finish` runs their end checks (the app's own record of spoofed headers, a never-answering
// app, a huge delivery, the mirror's replicas against the primary).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { repoSecret } from '../../src/shared/secrets.ts';
import { signInUser } from '../../test/helpers/session.ts';
import type { Config } from '../../src/shared/config.ts';
import { freePort } from '../../test/helpers/ports.ts';
import { sendJson } from '../lib/http.ts';
import { compareReplicas, drain, type SoakDb } from '../soak/converge.ts';
import type { Instance } from '../scopebase/instance.ts';
import { again, agent, describe, errorCode, judge, send, shape, type Failure, type Reply } from './judge.ts';
import { appRequest, appsEnv, judgeApp, startUpstream, type AppReq } from './apps.ts';
import { concrete, judgeMirror, mirrorRequest, startRecorder } from './mirror.ts';

/** One request in LANE_EVERY goes to each lane (10 %, 10 %: the rest is the main lane). */
export const LANE_EVERY = 10;

export interface Lane { name: string; slot: number; statuses: Map<number, number>; run(i: number): Promise<Failure | null> }

function sampler<T>(arb: fc.Arbitrary<T>, seed: number): (i: number) => T {
  const chunks = new Map<number, T[]>();
  return (i) => {
    const c = Math.floor(i / 500);
    if (!chunks.has(c)) {
      chunks.set(c, fc.sample(arb, { numRuns: 500, seed: seed + c }));
      chunks.delete(c - 4);
    }
    return chunks.get(c)![i % 500]!;
  };
}

export async function prepareLanes(seed: number, hang: boolean) {
  const dataDir = mkdtempSync(join(tmpdir(), 'scopebase-fuzz-'));
  const upstream = await startUpstream();
  const recorder = await startRecorder();
  const [mirrorPort, downPort] = [await freePort(), await freePort()];
  const mirrorSecret = `whsec_${randomBytes(32).toString('base64')}`;
  // A real session, as the sign-in callback makes it, so that apps get x-auth-user-* for it.
  const session = await signInUser({ dataDir, config: { account: { sessionTtlMs: 86_400_000 } } as Config }, 'acme', 'fuzzer');
  const env = {
    MIRROR_PORT: String(mirrorPort), MIRROR_SECRET: mirrorSecret,
    DB_MIRRORS: JSON.stringify([{ name: 'reference', url: `http://127.0.0.1:${mirrorPort}/hook`, secret: mirrorSecret }, { name: 'recorder', url: recorder.url, secret: mirrorSecret }]),
    APPS: appsEnv(upstream.url, `http://127.0.0.1:${downPort}`),
  };

  function attach(inst: Instance) {
    const bases = { proxy: inst.proxyUrl, mirror: `http://127.0.0.1:${mirrorPort}` };
    const mirrorHost = `acme.localhost:${mirrorPort}`;
    const token = session.cookie.split('=')[1]!;
    const count = (m: Map<number, number>, s: number) => m.set(s, (m.get(s) ?? 0) + 1);
    const takeMirror = sampler(mirrorRequest(mirrorHost, (repo) => repoSecret(inst.rootKey, 'acme', repo)), seed + 1_000_000);
    const takeApp = sampler(appRequest(inst.host, session.cookie), seed + 2_000_000);
    const mirror: Lane = {
      name: 'mirror', slot: 1, statuses: new Map(),
      async run(i) {
        const r = concrete(takeMirror(i), recorder.deliveries, mirrorSecret);
        try {
          const reply = await send(bases, r);
          count(mirror.statuses, reply.status);
          const why = judge(r, reply) ?? judgeMirror(r, reply);
          return why ? { req: `${describe(r)} [${r.change}] ${String(r.body ?? '').slice(0, 160)}`, status: reply.status, why } : null;
        } catch (e) {
          return { req: `${describe(r)} [${r.change}] ${shape(r)}`, status: 0, why: `no answer: ${(e as Error).message}${await again(bases, r)}` };
        }
      },
    };
    const apps: Lane = {
      name: 'apps', slot: 2, statuses: new Map(),
      async run(i) {
        const r: AppReq = takeApp(i);
        let reply: Reply | null = null;
        let error: string | null = null;
        try {
          reply = await send(bases, r);
          count(apps.statuses, reply.status);
        } catch (e) {
          error = (e as Error).message;
        }
        const why = judgeApp(r, reply, error, session.userId, token);
        if (why && !reply) return { req: `${describe(r)} session=${r.session} spoofed=${r.spoofed.join(',')} ${shape(r)}`, status: 0, why: `${why}${await again(bases, r)}` };
        return why ? { req: `${describe(r)} session=${r.session} spoofed=${r.spoofed.join(',')}${reply ? '' : ` ${shape(r)}`}`, status: reply?.status ?? 0, why } : null;
      },
    };
    // Started at once, checked at the end: an app that never answers (the proxy's upstream timeout, 60 s: not in --short).
    const hung = hang ? Array.from({ length: 3 }, (_, k) => send(bases, { base: 'proxy', method: 'GET', path: `/app/hang/${k}`, headers: { host: inst.host } }, 90_000).catch((e: Error) => e)) : [];

    async function finish(): Promise<{ failures: Failure[]; notes: string[] }> {
      const failures: Failure[] = [];
      const notes: string[] = [];
      const fail = (req: string, why: string, status = 0) => failures.push({ req, status, why });
      // A delivery and a read past the mirror's body limit (4 × DB_MAX_BODY_BYTES, 128 MiB): 413, not a crash; a read
      // sent without a secret is refused on its headers first (401, the body unread: docs/security.md).
      for (const path of ['/hook', '/web/_db/query']) {
        try {
          const big = await send(bases, { base: 'mirror', method: 'POST', path, headers: { host: mirrorHost, 'content-type': 'application/json' }, body: Buffer.alloc(130 * 2 ** 20, 0x20) }, 60_000);
          const expected = path === '/hook' ? [413] : [413, 401];
          if (!expected.includes(big.status) || judge({ base: 'mirror', method: 'POST', path, headers: {} }, big)) fail(`POST (mirror) ${path} with 130 MiB`, `answered ${big.status} ${big.text.slice(0, 100)}`, big.status);
        } catch (e) {
          // The server may close the connection once it has refused the body; then it must still answer afterwards.
          notes.push(`130 MiB to ${path}: ${(e as Error).message}`);
        }
      }
      for (const [k, h] of (await Promise.all(hung)).entries()) {
        if (h instanceof Error) fail(`GET /app/hang/${k}`, `no answer: ${h.message}`);
        else if (h.status !== 503 || errorCode(h) !== 'unavailable' || !h.headers['retry-after']) fail(`GET /app/hang/${k}`, `an app that never answers gave ${h.status} ${h.text.slice(0, 100)}`, h.status);
      }
      if (hung.length) notes.push(`${hung.length} requests to an app that never answers: 503 unavailable`);
      const report = await upstream.report();
      for (const s of report.spoofed) fail('(the app\'s own record)', `a spoofed header reached the app: ${s}`);
      notes.push(`the app received ${report.received} requests, ${report.spoofed.length} with a client's copy of a header only the proxy sets`);
      // The mirror's model check: every database the product delivered, replica against primary, row by row.
      const dbs: SoakDb[] = [...recorder.scopes.values()];
      const primary = (d: SoakDb, op: string, body: Record<string, unknown>) => sendJson(`${inst.proxyUrl}/${d.repo}/_db/${op}`, { body: { database: d.database, ...body }, dispatcher: agent, headers: { host: `${d.org}.localhost:${new URL(inst.proxyUrl).port}`, authorization: `Bearer ${repoSecret(inst.rootKey, d.org, d.repo)}` } });
      const replica = (d: SoakDb, body: Record<string, unknown>) => sendJson(`${bases.mirror}/${d.repo}/_db/query`, { body: { database: d.database, ...body }, dispatcher: agent, headers: { host: `${d.org}.localhost:${mirrorPort}`, authorization: `Bearer ${repoSecret(inst.rootKey, d.org, d.repo)}` } });
      const drained = await drain(dbs, primary, ['reference'], 120_000);
      for (const s of drained.stuck) fail('(the reference mirror)', s);
      const compared = await compareReplicas(drained.versions, primary, replica);
      for (const m of compared.mismatches) fail('(the reference mirror\'s replicas)', m);
      notes.push(`reference mirror: ${drained.versions.size} databases drained in ${(drained.ms / 1000).toFixed(1)} s; ${compared.tables} tables, ${compared.rows} rows equal to the primary's: ${compared.mismatches.length} mismatches; ${recorder.deliveries.length} real deliveries kept for replays`);
      return { failures, notes };
    }
    return { lanes: [mirror, apps], finish };
  }

  return {
    dataDir, env, attach,
    close() {
      upstream.stop();
      recorder.close();
    },
  };
}
