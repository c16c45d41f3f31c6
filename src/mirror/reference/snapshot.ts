// What the mirror asks of its source (SPEC 4.9): a database's snapshot into a file, the way a replica starts or
// heals, and pages of its change log, the way a replica a read waits on catches up while the sender backs off.
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { Transform } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { request, type Dispatcher } from 'undici';
import type { ChangeEvent, Scope } from '../../db/contract.ts';
import { ApiError } from '../../shared/errors.ts';
import { repoSecret } from '../../shared/secrets.ts';
import { parseEvent } from './event.ts';

export interface SnapshotSource {
  /** The proxy's address, e.g. http://127.0.0.1:8080 (Host is set to {org}.{baseDomain} here). */
  url: string;
  baseDomain: string;
  rootKey: Buffer;
  timeoutMs: number;
  maxBytes: number;
}

/** How often a source that answered 503 is asked again (each after its Retry-After, at most 2 s). */
const BUSY_RETRIES = 3;

/** POST {source}/{repo}/_db/{op} as the repo (Host and secret set here); an unreachable source is `unavailable`. */
function askSource(source: SnapshotSource, scope: Scope, op: 'snapshot' | 'changes', body: Record<string, unknown>) {
  const port = new URL(source.url).port;
  return request(`${source.url}/${scope.repo}/_db/${op}`, {
    method: 'POST',
    headers: {
      host: `${scope.org}.${source.baseDomain}${port ? `:${port}` : ''}`,
      authorization: `Bearer ${repoSecret(source.rootKey, scope.org, scope.repo)}`,
      'content-type': 'application/json',
    },
    body: JSON.stringify({ database: scope.database, ...body }),
    signal: AbortSignal.timeout(source.timeoutMs),
  }).catch((e: { code?: string; name?: string }) => {
    throw new ApiError('unavailable', `the ${op} source is unreachable (${e.code ?? e.name})`, undefined, { 'retry-after': '2' });
  });
}

/** The source's refusal as `unavailable` (retry later), with its status in `details.sourceStatus` and its code said. */
async function refusal(op: string, res: Dispatcher.ResponseData): Promise<ApiError> {
  const text = await res.body.text().catch(() => '');
  let code = '';
  try {
    code = String(JSON.parse(text).error.code).slice(0, 40);
  } catch { /* not the SPEC shape */ }
  // A 401 is a key mismatch, the one cause the operator fixes here (a development mirror generates its own key).
  const why = res.statusCode === 401 ? ': it refuses the secrets this mirror derives from its RUNTIME_ROOT_KEY; give the mirror the source\'s RUNTIME_ROOT_KEY' : '';
  return new ApiError('unavailable', `the ${op} source answered ${res.statusCode}${code ? ` ${code}` : ''}${why}`, { sourceStatus: res.statusCode }, { 'retry-after': '2' });
}

/** Events per page of a pull: a page is parsed on the mirror's event loop, and one event may carry 1 MiB of changeset. */
const PULL_PAGE = 32;

/**
 * One page of the source's change log after `since` (SPEC 4.9), its events checked as a hook's are; `gone` names the
 * oldest version still kept when `since` is older.
 */
export async function fetchChanges(source: SnapshotSource, scope: Scope, since: number): Promise<{ events: ChangeEvent[] } | { gone: number }> {
  const res = await askSource(source, scope, 'changes', { since, limit: PULL_PAGE });
  if (res.statusCode === 410) {
    const oldest = Number((await res.body.json().catch(() => null) as { error?: { details?: { oldestVersion?: unknown } } } | null)?.error?.details?.oldestVersion);
    if (Number.isSafeInteger(oldest)) return { gone: oldest };
  }
  if (res.statusCode !== 200) throw await refusal('changes', res);
  const page = await res.body.json() as { events: unknown[] };
  const events = page.events.map(parseEvent);
  // Only the scope asked for: a gateway at MIRROR_SOURCE_URL routing to the wrong place must not write another replica.
  if (events.some((e) => e.org !== scope.org || e.repo !== scope.repo || e.database !== scope.database)) {
    throw new ApiError('unavailable', 'the changes source answered events of another database than the one asked for', undefined, { 'retry-after': '2' });
  }
  return { events };
}

/** Writes the snapshot to `target`; resolves with the version the source announced. Failures are `unavailable` (retry later). */
export async function fetchSnapshot(source: SnapshotSource, scope: Scope, target: string): Promise<number> {
  const ask = () => askSource(source, scope, 'snapshot', {});
  let res = await ask();
  // A busy source (its 4 snapshots per repo at once taken, e.g. by this mirror's other databases) is asked again
  // after its Retry-After, a few times, rather than fail the hook or the read that needs this replica.
  for (let retry = 0; res.statusCode === 503 && retry < BUSY_RETRIES; retry++) {
    await res.body.dump();
    await sleep(Math.min(Number(res.headers['retry-after']) || 1, 2) * 1000);
    res = await ask();
  }
  if (res.statusCode !== 200) throw await refusal('snapshot', res);
  const version = Number(res.headers['x-db-version']);
  let size = 0;
  const limit = new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      done(size > source.maxBytes ? new Error('snapshot larger than DB_MAX_SIZE_BYTES') : null, chunk);
    },
  });
  try {
    await pipeline(res.body, limit, createWriteStream(target, { mode: 0o600 }));
  } catch (e) {
    throw new ApiError('unavailable', `the snapshot download failed: ${(e as Error).message.slice(0, 120)}`, undefined, { 'retry-after': '2' });
  }
  return Number.isSafeInteger(version) ? version : -1;
}
