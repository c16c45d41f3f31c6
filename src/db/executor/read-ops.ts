// Executor-side reads: query (one snapshot for all statements), status, changes and snapshot.
import { rmSync } from 'node:fs';
import { DatabaseSync } from 'node:sqlite';
import { ApiError } from '../../shared/errors.ts';
import type { DbHandle } from './handles.ts';
import { ResultBudget, runRead, type RowShape, type StatementSpec } from './statements.ts';
import { failure, type Reply } from './reply.ts';
import { userTableList } from './install.ts';

interface QueryBody {
  /** Set by the service for the libSQL protocol's `describe` (never by a client): that statement, prepared, not run. */
  describe?: string;
  sql?: string;
  params?: unknown;
  statements?: StatementSpec[];
  rows?: RowShape;
  /** Set by the service for a libSQL pipeline (never by a client): what is left of its results' allowance. */
  maxResultBytes?: number;
  /** Set by the service for a libSQL pipeline (never by a client): a database that does not exist reads as an empty one. */
  asEmpty?: boolean;
}

/** Every statement of one request reads one snapshot: a read transaction spans them, with the version it shows. */
export function query(h: DbHandle, body: QueryBody, maxResultBytes: number): Reply {
  if (body.describe !== undefined) return describe(h, body.describe);
  const statements = body.statements ?? [{ sql: body.sql!, params: body.params }];
  const shape = body.rows ?? 'arrays';
  const budget = new ResultBudget(maxResultBytes, body.maxResultBytes);
  h.internal('BEGIN').run();
  try {
    const version = h.version();
    const results: string[] = [];
    for (let i = 0; i < statements.length; i++) {
      try {
        results.push(runRead(h, statements[i]!, i, shape, budget));
      } catch (e) {
        return failure(e, h.sandbox.denied, i);
      }
    }
    const reply = `{"results":[${results.join(',')}],"version":${version}}`;
    try {
      return { status: 200, body: budget.check(reply) };
    } catch (e) {
      return failure(e, null, statements.length - 1);
    }
  } finally {
    h.internal('COMMIT').run();
  }
}

/** HRANA_3_SPEC's DescribeResult: read-only is what the sandbox lets prepare as a read (SQLite's own is not exposed). */
export function describe(h: DbHandle, sql: string): Reply {
  try {
    let readonly = true;
    let p;
    try {
      p = h.read(() => h.prepare(sql, 'read'));
    } catch {
      readonly = false;
      p = h.prepare(sql, 'write');
    }
    const cols = p.stmt.columns().map((c) => ({ name: c.name, decltype: c.type ?? null }));
    const params = p.params.names.map((name) => ({ name }));
    return { status: 200, body: JSON.stringify({ params, cols, is_explain: /^\s*EXPLAIN\b/i.test(sql), is_readonly: readonly }) };
  } catch (e) {
    return failure(e, h.sandbox.denied, 0);
  }
}

/** A table's row count; null when it cannot be read (a virtual table whose `content=` table is gone): status still answers. */
export function rowCount(h: DbHandle, name: string): number | null {
  try {
    return Number((h.db.prepare(`SELECT count(*) AS n FROM ${quoteIdent(name)}`).get() as { n: number }).n);
  } catch {
    return null;
  }
}

/** SPEC 4.7's (and an import's) tables: each with its row count; a virtual table marked, its shadow tables left out. */
export function tablesWithRows(h: DbHandle): { name: string; rows: number | null; virtual?: true; module?: string }[] {
  return userTableList(h.db, 'main').map(({ name, ...kind }) => ({ name, rows: rowCount(h, name), ...kind }));
}

const quoteIdent = (name: string) => `"${name.replaceAll('"', '""')}"`;

export function status(h: DbHandle, history: { oldestVersion: number | null; oldestTime: string | null } | null): Reply {
  h.internal('BEGIN').run();
  try {
    const version = h.version();
    const pages = h.internal('SELECT page_count * page_size AS size FROM pragma_page_count, pragma_page_size').get() as { size: number };
    const tables = tablesWithRows(h);
    const applied = h.internal('SELECT count(*) AS n, (SELECT id FROM _scopebase_migrations ORDER BY seq DESC LIMIT 1) AS latest FROM _scopebase_migrations').get() as { n: number; latest: string | null };
    return { status: 200, body: JSON.stringify({ version, sizeBytes: Number(pages.size), tables, migrations: { applied: Number(applied.n), latest: applied.latest }, ...(history ? { history } : {}) }) };
  } finally {
    h.internal('COMMIT').run();
  }
}

/**
 * A page of events stops past this many bytes (always one event at least). An event's changeset may be 1 MiB, so
 * 1,000 of them made a text longer than V8 allows (a 500), and a cluster's shipment of 256 was larger than its
 * follower accepts (src/cluster/routes.ts): the follower then never caught up.
 */
export const CHANGES_PAGE_BYTES = 32 * 1024 * 1024;

export interface ChangesOptions {
  /** About this many bytes of events at most (CHANGES_PAGE_BYTES). */
  maxBytes?: number;
  /**
   * A cluster primary's (src/cluster/shipper.ts): only the events up to the first without a changeset, 204 when that
   * is the first, so the node sends this text as it is rather than parse a page of it.
   */
  shipment?: boolean;
  /**
   * Mirror delivery's (src/mirror/delivery/feed.ts): the page also says how large the schema it was read with is
   * (`"schema": {"bytes", "cookie"}`), which tells the delivery thread whether parsing that schema itself is cheap.
   */
  schema?: boolean;
}

/** SPEC 4.9: events after `since`, oldest first, at most `limit` of them; 410 when `since` is older than what is kept. */
export function changes(h: DbHandle, since: number, limit: number, { maxBytes = CHANGES_PAGE_BYTES, shipment = false, schema = false }: ChangesOptions = {}): Reply {
  h.internal('BEGIN').run();
  try {
    const version = h.version();
    const oldest = h.internal('SELECT min(version) AS v FROM _scopebase_changes').get() as { v: number | null };
    const firstKept = oldest.v === null ? version + 1 : Number(oldest.v);
    if (since < version && since < firstKept - 1) {
      throw new ApiError('gone', `events after version ${since} are no longer kept; the oldest kept is ${firstKept}: start again from /_db/snapshot`, { oldestVersion: firstKept, version });
    }
    const events: string[] = [];
    let bytes = 0;
    for (const r of h.internal('SELECT event FROM _scopebase_changes WHERE version > ? ORDER BY version LIMIT ?').iterate(since, limit) as Iterable<{ event: string }>) {
      if (events.length > 0 && bytes + r.event.length > maxBytes) break;
      if (shipment && (JSON.parse(r.event) as { changeset: unknown }).changeset === null) break;
      events.push(r.event);
      bytes += r.event.length;
    }
    if (shipment && events.length === 0) return { status: 204, body: '' };
    return { status: 200, body: `{"events":[${events.join(',')}],"version":${version}${schema ? `,"schema":${schemaSize(h)}` : ''}}` };
  } catch (e) {
    return failure(e, null);
  } finally {
    h.internal('COMMIT').run();
  }
}

/** `{"bytes": B, "cookie": C}`: the SQL text of the schema as of this read (octet_length reads no text) and its schema cookie. */
function schemaSize(h: DbHandle): string {
  const { bytes } = h.internal('SELECT coalesce(sum(octet_length(sql)), 0) AS bytes FROM sqlite_schema').get() as { bytes: number };
  return JSON.stringify({ bytes: Number(bytes), cookie: h.schemaVersion() });
}

/** A consistent, compact copy of the database in a new file; the version is read from the copy itself. */
export function snapshot(h: DbHandle, target: string): Reply {
  rmSync(target, { force: true }); // left by a process that died making it (the read is then run once more)
  h.sandbox.mode = 'internal';
  // VACUUM INTO attaches the target internally: lift the sandbox's attach limit of 0 for this one statement.
  h.db.limits.attach = 1;
  try {
    h.db.exec(`VACUUM INTO '${target.replaceAll("'", "''")}'`);
  } finally {
    h.db.limits.attach = 0;
  }
  const copy = new DatabaseSync(target, { readOnly: true });
  try {
    const row = copy.prepare("SELECT value FROM _scopebase_meta WHERE key = 'version'").get() as { value: number };
    return { status: 200, body: JSON.stringify({ path: target, version: Number(row.value) }) };
  } finally {
    copy.close();
  }
}
