// Whether a request's changeset shows every row it changed. SQLite's session extension records nothing for a rowid
// table without a declared PRIMARY KEY (nor for a virtual table), nor for a row with NULL in a key column, which a
// key that is not the rowid and not NOT NULL allows (`id TEXT PRIMARY KEY`, a composite key, `INTEGER PRIMARY KEY
// DESC`). Rows left out would silently be missing on mirrors and from history: such a change carries no changeset.
import type { DbHandle } from './handles.ts';

/**
 * How a table's changes show in a changeset: every row, none for certain, or every row while its key holds no NULL.
 * A virtual table shows none of its own, but it keeps everything in its shadow tables, which a session records:
 * `shadows` (every one of them showing every row) tell whether it changed, never what (a mirror cannot write them).
 */
export type Cover = { kind: 'all' } | { kind: 'none' } | { kind: 'unlessNull'; probe: string } | { kind: 'virtual'; shadows: string[] };

const ALL: Cover = { kind: 'all' };
const NONE: Cover = { kind: 'none' };

/** The table's cover and its single key column (when the only doubt is a NULL in it). */
const KEYED = `SELECT CASE
    WHEN s.sql LIKE 'CREATE VIRTUAL%' THEN 'virtual'
    WHEN k.pks = 0 THEN 'none'
    WHEN l.wr = 1 OR k.nullable = 0 OR (k.pks = 1 AND i.n = 0) THEN 'all'
    WHEN k.pks = 1 THEN 'unlessNull' ELSE 'none' END AS cover, k.col AS col
  FROM main.sqlite_schema s,
    (SELECT count(*) AS pks, sum(p."notnull" = 0) AS nullable, max(p.name) AS col FROM pragma_table_info(?1) p WHERE p.pk > 0) k,
    (SELECT count(*) AS n FROM pragma_index_list(?1) WHERE origin = 'pk') i,
    (SELECT coalesce(max(wr), 0) AS wr FROM pragma_table_list WHERE name = ?1 AND schema = 'main') l
  WHERE s.name = ?1 AND s.type = 'table'
  UNION ALL SELECT 'none', NULL LIMIT 1`;

const quote = (name: string): string => `"${name.replaceAll('"', '""')}"`;

/** Known per table until the schema changes; `schema`: the connection's schema version now. */
function coverOf(h: DbHandle, table: string, schema: number): Cover {
  const keyed = h.keyed(schema);
  let cover = keyed.known.get(table);
  if (cover === undefined) {
    const r = h.internal(KEYED).get(table) as { cover: string; col: string | null };
    // A seek on the key's own index: as cheap as the write's own lookup.
    cover = r.cover === 'all' ? ALL : r.cover === 'unlessNull' && r.col !== null ? { kind: 'unlessNull', probe: `SELECT 1 FROM main.${quote(table)} WHERE ${quote(r.col)} IS NULL LIMIT 1` }
      : r.cover === 'virtual' ? { kind: 'virtual', shadows: [...h.shadowTables(schema)].filter((t) => t.toLowerCase().startsWith(`${table.toLowerCase()}_`)) } : NONE;
    keyed.known.set(table, cover);
  }
  return cover;
}

function holdsNullKey(h: DbHandle, probe: string): boolean {
  try {
    return h.internal(probe).get() !== undefined;
  } catch {
    return true; // the table is gone (dropped in the request): no claim about its rows
  }
}

/**
 * Watches the tables with a NULL-able single key that one request (or transaction) writes. Its changeset shows all
 * their rows when none held a NULL key before its first write to the table and none does at the end: a row that held
 * one only in between was made and unmade inside the request, and its net change is in the changeset.
 */
export class KeyWatch {
  private readonly seen = new Set<string>();
  private nullBefore = false;
  /** covers()'s last answer, for the same tables asked again in the same state (the no-change check, then the event). */
  private verdict: { tables: string; rows: boolean; changes: boolean } | null = null;
  private readonly h: DbHandle;

  constructor(h: DbHandle) {
    this.h = h;
  }

  /** Before a statement runs that writes these tables (triggers and cascades included), prepared under `schema`. */
  enter(tables: Iterable<string>, schema: number): void {
    this.verdict = null;
    for (const t of tables) {
      if (this.seen.has(t)) continue;
      this.seen.add(t);
      const cover = coverOf(this.h, t, schema);
      if (cover.kind === 'unlessNull' && !this.nullBefore) this.nullBefore = holdsNullKey(this.h, cover.probe);
    }
  }

  /**
   * After the writes: whether a changeset shows every row they changed; `virtual`: whether it shows that they changed
   * (a virtual table by its shadow tables).
   */
  covers(tables: Iterable<string>, virtual = false): boolean {
    const names = [...tables];
    const key = names.join('\0');
    if (this.verdict?.tables !== key) this.verdict = { tables: key, ...this.judge(names) };
    return virtual ? this.verdict.changes : this.verdict.rows;
  }

  private judge(tables: string[]): { rows: boolean; changes: boolean } {
    const schema = this.h.schemaVersion();
    const neither = { rows: false, changes: false };
    let rows = true;
    for (const t of tables) {
      const cover = coverOf(this.h, t, schema);
      if (cover.kind === 'none') return neither;
      if (cover.kind === 'unlessNull' && (this.nullBefore || !this.seen.has(t) || holdsNullKey(this.h, cover.probe))) return neither;
      if (cover.kind === 'virtual') {
        rows = false;
        if (cover.shadows.length === 0 || !cover.shadows.every((s) => coverOf(this.h, s, schema).kind === 'all')) return neither;
      }
    }
    return { rows, changes: true };
  }
}

/** Whether these tables include a virtual one: its module may hold writes in memory (FTS5's pending terms) until a savepoint. */
export function anyVirtual(h: DbHandle, tables: Iterable<string>): boolean {
  const schema = h.schemaVersion();
  for (const t of tables) if (coverOf(h, t, schema).kind === 'virtual') return true;
  return false;
}

/** The tables as the user made them: a full-text index's shadow tables (`f_data`, …) go by the index's name. */
export function asMade(h: DbHandle, tables: string[]): string[] {
  if (tables.length < 2) return tables; // a shadow table is never written alone
  const shadow = h.shadowTables(h.schemaVersion());
  return shadow.size === 0 ? tables : tables.filter((t) => !shadow.has(t));
}

/** For a change made without a watch (a migration, a restore): a NULL-able key means not shown. */
export function capturable(h: DbHandle, tables: Iterable<string>, watch?: KeyWatch): boolean {
  if (watch) return watch.covers(tables);
  const schema = h.schemaVersion();
  for (const t of tables) if (coverOf(h, t, schema).kind !== 'all') return false;
  return true;
}
