// Rebuilds a database as it was at a version, from its history (log.ts): a segment's base plus its records' page
// images gives the database after any commit; a version inside a group commit is reached from the commit before
// it by applying the group's earlier changesets (write-ops.ts ends a group at any change a changeset cannot carry).
import { closeSync, copyFileSync, ftruncateSync, openSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { firstRecord, readFrames, readRecords, segments, type RecordMeta } from './log.ts';
import { INTERNAL_SCHEMA } from '../executor/schema.ts';

export interface Indexed { dir: string; records: RecordMeta[] }

/** Every record of every segment, oldest first. */
export function index(historyDir: string): Indexed[] {
  return segments(historyDir).map((s) => ({ dir: join(historyDir, s), records: readRecords(join(historyDir, s)) })).filter((s) => s.records.length > 0);
}

/** The oldest version that can be rebuilt, and when it was committed; null without history. */
export function oldest(idx: Indexed[]): { version: number; time: number } | null {
  return oldestOf(idx[0]?.records[0]);
}

/** The same from the files, reading one record header (for `status`, which runs often). */
export function oldestIn(historyDir: string): { version: number; time: number } | null {
  for (const s of segments(historyDir)) {
    const first = firstRecord(join(historyDir, s));
    if (first) return oldestOf(first);
  }
  return null;
}

function oldestOf(first: RecordMeta | undefined): { version: number; time: number } | null {
  if (!first) return null;
  return { version: first.prevVersion === 0 ? 0 : first.version, time: first.committedAt };
}

/** The version in force at `time` (ms): the last one committed at or before it; null when history starts later. */
export function versionAt(idx: Indexed[], time: number): { version: number; committedAt: number } | null {
  let found: { version: number; committedAt: number } | null = null;
  for (const s of idx) for (const r of s.records) if (r.committedAt <= time) found = { version: r.version, committedAt: r.committedAt };
  return found;
}

/** Version 0, the new empty database, dates from the commit that made it (its first): status.history's oldestTime. */
const createdAt = (idx: Indexed[], version: number) => (version === 0 && idx[0]?.records[0]?.prevVersion === 0 ? idx[0].records[0].committedAt : undefined);

/**
 * When `version` was committed, as `rebuild` would report it, without building anything: the time of its record, or
 * of the group commit that holds it; for version 0 of a database whose history starts at creation, when it was
 * made; undefined when history does not reach it.
 */
export function committedAtOf(idx: Indexed[], version: number): { committedAt: number } | undefined {
  const exact = find(idx, version);
  if (exact) return { committedAt: exact.seg.records[exact.i]!.committedAt };
  const created = createdAt(idx, version);
  if (created !== undefined) return { committedAt: created };
  for (const seg of idx) for (const r of seg.records) if (r.prevVersion < version && version < r.version) return { committedAt: r.committedAt };
  return undefined;
}

/** Writes base + records[0..upto] of a segment into `target`: the database right after that record's commit. */
function build(seg: Indexed, upto: number, target: string): void {
  copyFileSync(join(seg.dir, 'base'), target);
  const fd = openSync(target, 'r+');
  try {
    for (let i = 0; i <= upto; i++) {
      const rec = seg.records[i]!;
      for (const f of readFrames(seg.dir, rec)) writeSync(fd, f.page, 0, f.page.length, (f.pgno - 1) * rec.pageSize);
    }
    const last = seg.records[upto]!;
    ftruncateSync(fd, last.dbPages * last.pageSize);
  } finally {
    closeSync(fd);
  }
}

function find(idx: Indexed[], version: number): { seg: Indexed; i: number } | null {
  for (const seg of idx) {
    const i = seg.records.findIndex((r) => r.version === version);
    if (i >= 0) return { seg, i };
  }
  return null;
}

/** Removes a database file and its journal companions. */
export function removeCopy(path: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) rmSync(path + suffix, { force: true });
}

/**
 * Writes the database as of `version` into `target` and returns when that version was committed (as its change event
 * says; version 0, a new database: when it was made), or returns undefined when history cannot rebuild it.
 */
export function rebuild(idx: Indexed[], version: number, target: string): { committedAt: number } | undefined {
  const exact = find(idx, version);
  if (exact) {
    build(exact.seg, exact.i, target);
    return { committedAt: exact.seg.records[exact.i]!.committedAt };
  }
  const created = createdAt(idx, version);
  if (created !== undefined) {
    fresh(target);
    return { committedAt: created };
  }
  // Inside a group commit: the commit before it, then the group's own changesets up to `version`.
  let group: { seg: Indexed; i: number } | null = null;
  for (const seg of idx) {
    const i = seg.records.findIndex((r) => r.prevVersion < version && version < r.version);
    if (i >= 0) group = { seg, i };
  }
  if (!group) return undefined;
  const rec = group.seg.records[group.i]!;
  const before = rec.prevVersion === 0 ? null : find(idx, rec.prevVersion);
  if (rec.prevVersion !== 0 && !before) return undefined;
  const after = `${target}.after`;
  try {
    build(group.seg, group.i, after);
    const events = readEvents(after, rec.prevVersion, version);
    if (events.length !== version - rec.prevVersion || events.some((e) => e.changeset === null)) return undefined;
    if (before) build(before.seg, before.i, target);
    else fresh(target);
    const db = new DatabaseSync(target, { enableForeignKeyConstraints: false });
    try {
      db.exec('BEGIN');
      for (const e of events) db.applyChangeset(Buffer.from(e.changeset!, 'base64'));
      db.exec('COMMIT');
    } finally {
      db.close();
    }
    return { committedAt: Date.parse(events.at(-1)!.committedAt) }; // a request's event has its own time within the group

  } finally {
    removeCopy(after);
  }
}

/** The events of versions (from, to] as logged in a rebuilt copy (changeset null where an event carries none). */
function readEvents(path: string, from: number, to: number): { changeset: string | null; committedAt: string }[] {
  const db = new DatabaseSync(path, { readOnly: true });
  try {
    const rows = db.prepare('SELECT event FROM _scopebase_changes WHERE version > ? AND version <= ? ORDER BY version').all(from, to) as { event: string }[];
    return rows.map((r) => JSON.parse(r.event) as { changeset: string | null; committedAt: string });
  } finally {
    db.close();
  }
}

/** A new, empty database: what every database held at version 0. */
function fresh(target: string): void {
  const db = new DatabaseSync(target);
  try {
    db.exec(`PRAGMA journal_mode=WAL; ${INTERNAL_SCHEMA}`);
  } finally {
    db.close();
  }
}
