// Which segments of a database's history go (DESIGN.md, "Bounds"): those past the window, past the database's cap,
// and past its repo's, oldest history of the repo first. Runs in the writer of the database whose segments it drops
// (one whose segment just closed, or the background sweep's visit in its lane), so no restore of it reads one as it goes.
import { readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { firstRecord, lastRecord, peekLastRecord, segments } from './log.ts';
import type { HistoryOptions } from './archive.ts';

/**
 * The current segment of a database not written for this long may go for the repo's cap (its next write starts a new
 * one, copying the database): one written more recently stays, or each of its writes could copy it anew.
 */
export const IDLE_MS = 3_600_000;

interface Segment {
  database: string;
  dir: string;
  bytes: number;
  /** When the states it holds stop being the newest: the next segment's first commit, or its own last one. */
  end: number;
  current: boolean;
}

function segmentBytes(dir: string): number {
  let n = 0;
  for (const f of ['base', 'log']) n += statSync(join(dir, f), { throwIfNoEntry: false })?.size ?? 0;
  return n;
}

/**
 * A database's segments, oldest first. Another database's (`own` false) may be written meanwhile: its last record is
 * only peeked at, and one being appended to counts as written now.
 */
function segmentsOf(historyDir: string, own: boolean, now: number): Segment[] {
  const names = segments(historyDir);
  const out: Segment[] = [];
  let nextStart: number | null = null;
  for (let i = names.length - 1; i >= 0; i--) {
    const dir = join(historyDir, names[i]!);
    const last = nextStart === null ? (own ? lastRecord(dir) : peekLastRecord(dir) ?? { meta: { committedAt: now } }) : null;
    out.push({ database: historyDir, dir, bytes: segmentBytes(dir), end: nextStart ?? last?.meta.committedAt ?? 0, current: i === names.length - 1 });
    // One without records (its commit failed after its base was copied) holds no state: the one before ends no sooner.
    nextStart = firstRecord(dir)?.committedAt ?? nextStart;
  }
  out.reverse();
  // A clock set back can make a later segment seem to end sooner: a database's segments go oldest first all the same.
  for (let i = 1; i < out.length; i++) out[i]!.end = Math.max(out[i]!.end, out[i - 1]!.end);
  return out;
}

/** Every segment of every database's history in the repo of `historyDir`. */
function repoSegments(historyDir: string, now: number): Segment[] {
  const repoDir = dirname(historyDir);
  let names: string[];
  try {
    names = readdirSync(repoDir);
  } catch {
    return [];
  }
  return names.flatMap((name) => (name === basename(historyDir) ? [] : segmentsOf(join(repoDir, name), false, now)));
}

/**
 * Drops the database's old segments: those whose successor began before the window (kept states are all later),
 * then its oldest past its own cap, then those among the repo's oldest history past the repo's cap. Never its current
 * segment when its writer just began it (`sweep` false); the sweep's visit also drops a current segment that idled
 * IDLE_MS and is among the repo's oldest. Other databases' segments are counted, never touched: each goes in its own
 * database's lane. Returns the bytes dropped.
 */
export function prune(opts: HistoryOptions, historyDir: string, sweep: boolean): number {
  removeLeftovers(historyDir);
  const now = Date.now();
  const own = segmentsOf(historyDir, true, now);
  const gone = new Set<Segment>();
  const drop = (s: Segment) => gone.add(s);
  const cutoff = now - opts.days * 86_400_000;
  for (const s of own) {
    if (s.current || s.end >= cutoff) break;
    drop(s);
  }
  let total = own.reduce((n, s) => n + (gone.has(s) ? 0 : s.bytes), 0);
  for (const s of own) {
    if (total <= opts.maxBytes || s.current) break;
    if (!gone.has(s)) total -= s.bytes;
    drop(s);
  }
  // The repo's history, oldest first: within a database ends only grow, so each loses a prefix of its segments.
  const repo = [...own.filter((s) => !gone.has(s)), ...repoSegments(historyDir, now)].sort((a, b) => a.end - b.end);
  let repoTotal = repo.reduce((n, s) => n + s.bytes, 0);
  for (const s of repo) {
    if (repoTotal <= opts.repoMaxBytes) break;
    if (s.current && s.database === historyDir && !(sweep && s.end < now - IDLE_MS)) break; // its database's own last state
    if (s.current && s.end >= now - IDLE_MS) continue; // another database's, written lately: it stays (IDLE_MS)
    repoTotal -= s.bytes;
    if (s.database === historyDir) drop(s);
  }
  let freed = 0;
  for (const s of gone) {
    remove(s.dir);
    freed += s.bytes;
  }
  return freed;
}

const GONE = '.gone';

/** Renamed out of the history first: a process killed while removing it leaves no segment without its base. */
function remove(segmentDir: string): void {
  try {
    renameSync(segmentDir, segmentDir + GONE);
  } catch {
    return; // already gone
  }
  rmSync(segmentDir + GONE, { recursive: true, force: true });
}

/** What a process killed while removing segments left (segments() no longer sees them). */
function removeLeftovers(historyDir: string): void {
  let names: string[];
  try {
    names = readdirSync(historyDir);
  } catch {
    return;
  }
  for (const n of names) if (n.endsWith(GONE)) rmSync(join(historyDir, n), { recursive: true, force: true });
}
