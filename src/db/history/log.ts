// The history of one database on disk: segments, each a base file and an append-only log of commit records.
//   {historyDir}/{segment}/base   the database file as it was when the segment began (a raw copy)
//   {historyDir}/{segment}/log    records: [header 56 B][frames][total length u32], one per commit
// A record holds the page images one commit wrote (wal.ts), so base + records 0..k is the database after record k.
import { closeSync, existsSync, fstatSync, ftruncateSync, openSync, readdirSync, readSync, writeSync, writevSync } from 'node:fs';
import { join } from 'node:path';
import { inflateRawSync } from 'node:zlib';

const RAW = 0x53424830; // "SBH0": page images as they are
const DEFLATED = 0x53424831; // "SBH1": deflated (older segments may be compressed later)
const HEADER = 56;

export interface RecordMeta {
  /** Where the record starts in the log, its payload's length, and whether that is deflated. */
  offset: number;
  payload: number;
  deflated: boolean;
  version: number;
  /** The version before this commit: a group commit covers versions (prevVersion, version]. */
  prevVersion: number;
  committedAt: number;
  pageSize: number;
  dbPages: number;
  salt1: number;
  salt2: number;
  /** Where the commit ended in the write-ahead log: the next commit's frames start here (same salts). */
  walEnd: number;
}

export type Frame = { pgno: number; page: Buffer };

/** Segment names sort in creation order. */
export function segments(historyDir: string): string[] {
  try {
    return readdirSync(historyDir).filter((n) => /^\d{10}$/.test(n)).sort();
  } catch {
    return [];
  }
}

export const segmentName = (n: number) => String(n).padStart(10, '0');

/** Appends one record to a log opened for appending; returns its length in bytes. */
export function appendRecord(fd: number, meta: Omit<RecordMeta, 'offset' | 'payload' | 'deflated'>, frames: Frame[]): number {
  // Written raw, straight from the log's pages (one writev): deflate would cost ~50 µs a commit, a quarter of a synced one.
  const numbers = Buffer.allocUnsafe(frames.length * 4);
  const parts: Buffer[] = [];
  const head = Buffer.allocUnsafe(HEADER);
  parts.push(head);
  let payload = 0;
  frames.forEach((f, i) => {
    numbers.writeUInt32BE(f.pgno, i * 4);
    parts.push(numbers.subarray(i * 4, i * 4 + 4), f.page);
    payload += 4 + f.page.length;
  });
  const length = HEADER + payload + 4;
  head.writeUInt32BE(RAW, 0);
  head.writeUInt32BE(payload, 4);
  head.writeDoubleBE(meta.version, 8);
  head.writeDoubleBE(meta.prevVersion, 16);
  head.writeDoubleBE(meta.committedAt, 24);
  head.writeUInt32BE(meta.pageSize, 32);
  head.writeUInt32BE(meta.dbPages, 36);
  head.writeUInt32BE(meta.salt1, 40);
  head.writeUInt32BE(meta.salt2, 44);
  head.writeDoubleBE(meta.walEnd, 48);
  const trailer = Buffer.allocUnsafe(4);
  trailer.writeUInt32BE(length, 0);
  parts.push(trailer);
  let written = writevSync(fd, parts);
  // writev may write less than asked (rare, on a nearly full disk): the rest follows.
  if (written < length) for (const whole = Buffer.concat(parts); written < length;) written += writeSync(fd, whole, written);
  return length;
}

function decode(h: Buffer, offset: number): RecordMeta | null {
  const magic = h.readUInt32BE(0);
  if (magic !== RAW && magic !== DEFLATED) return null;
  return {
    offset, payload: h.readUInt32BE(4), deflated: magic === DEFLATED, version: h.readDoubleBE(8), prevVersion: h.readDoubleBE(16), committedAt: h.readDoubleBE(24),
    pageSize: h.readUInt32BE(32), dbPages: h.readUInt32BE(36), salt1: h.readUInt32BE(40), salt2: h.readUInt32BE(44), walEnd: h.readDoubleBE(48),
  };
}

function readAt(fd: number, length: number, position: number): Buffer | null {
  const buf = Buffer.allocUnsafe(length);
  return readSync(fd, buf, 0, length, position) === length ? buf : null;
}

/** Every whole record of a segment's log, oldest first. A torn tail (a crash mid-append) is cut off. */
export function readRecords(segmentDir: string): RecordMeta[] {
  const path = join(segmentDir, 'log');
  if (!existsSync(path)) return [];
  const fd = openSync(path, 'r+');
  try {
    const size = fstatSync(fd).size;
    const out: RecordMeta[] = [];
    let at = 0;
    while (at + HEADER + 4 <= size) {
      const h = readAt(fd, HEADER, at);
      const meta = h && decode(h, at);
      if (!meta || at + HEADER + meta.payload + 4 > size) break;
      const trailer = readAt(fd, 4, at + HEADER + meta.payload)!;
      if (trailer.readUInt32BE(0) !== HEADER + meta.payload + 4) break;
      out.push(meta);
      at += HEADER + meta.payload + 4;
    }
    if (at < size) ftruncateSync(fd, at);
    return out;
  } finally {
    closeSync(fd);
  }
}

/**
 * The last record of a segment, read from its trailer (no scan, nothing written); null when the tail is not whole (a
 * crash mid-append, or an append under way when another database's prune reads it).
 */
export function peekLastRecord(segmentDir: string): { meta: RecordMeta; logBytes: number } | null {
  let fd: number;
  try {
    fd = openSync(join(segmentDir, 'log'), 'r');
  } catch {
    return null;
  }
  try {
    const size = fstatSync(fd).size;
    const t = size >= HEADER + 4 ? readAt(fd, 4, size - 4) : null;
    const len = t?.readUInt32BE(0) ?? 0;
    const h = len >= HEADER + 4 && len <= size ? readAt(fd, HEADER, size - len) : null;
    const meta = h && decode(h, size - len);
    return meta && HEADER + meta.payload + 4 === len ? { meta, logBytes: size } : null;
  } finally {
    closeSync(fd);
  }
}

/** The last record of a segment, read from its trailer; falls back to a scan (which cuts a torn tail) when the tail is torn. */
export function lastRecord(segmentDir: string): { meta: RecordMeta; logBytes: number } | null {
  if (!existsSync(join(segmentDir, 'log'))) return null;
  const peeked = peekLastRecord(segmentDir);
  if (peeked) return peeked;
  const all = readRecords(segmentDir);
  const last = all.at(-1);
  return last ? { meta: last, logBytes: last.offset + HEADER + last.payload + 4 } : null;
}

/** The first record of a segment (one read: what `status` needs, without walking the log). */
export function firstRecord(segmentDir: string): RecordMeta | null {
  let fd: number;
  try {
    fd = openSync(join(segmentDir, 'log'), 'r');
  } catch {
    return null;
  }
  try {
    const h = readAt(fd, HEADER, 0);
    return h ? decode(h, 0) : null;
  } finally {
    closeSync(fd);
  }
}

export function readFrames(segmentDir: string, meta: RecordMeta): Frame[] {
  const fd = openSync(join(segmentDir, 'log'), 'r');
  let raw: Buffer;
  try {
    const payload = readAt(fd, meta.payload, meta.offset + HEADER)!;
    raw = meta.deflated ? inflateRawSync(payload) : payload;
  } finally {
    closeSync(fd);
  }
  const frames: Frame[] = [];
  for (let at = 0; at < raw.length; at += 4 + meta.pageSize) frames.push({ pgno: raw.readUInt32BE(at), page: raw.subarray(at + 4, at + 4 + meta.pageSize) });
  return frames;
}
