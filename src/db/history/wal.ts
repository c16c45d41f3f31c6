// Reading SQLite's write-ahead log (https://sqlite.org/fileformat2.html#walformat): the page images a commit wrote.
// History keeps exactly these bytes, so any committed state can be rebuilt page for page, DDL and all.
import { readSync } from 'node:fs';

const HEADER = 32;
const FRAME_HEADER = 24;

export interface WalHeader { pageSize: number; salt1: number; salt2: number }

export interface WalCommit {
  /** Byte offset just past the last commit frame read. */
  end: number;
  /** The database's size in pages after that commit. */
  dbPages: number;
  /** The frames [from, end): page number and page image, in log order. */
  frames: { pgno: number; page: Buffer }[];
}

function readAt(fd: number, length: number, position: number): Buffer | null {
  const buf = Buffer.allocUnsafe(length);
  const n = readSync(fd, buf, 0, length, position);
  return n === length ? buf : null;
}

/** The log's header, or null when there is none (never written, or checkpointed and truncated). */
export function readWalHeader(fd: number): WalHeader | null {
  const h = readAt(fd, HEADER, 0);
  if (!h || (h.readUInt32BE(0) & 0xfffffffe) !== 0x377f0682) return null;
  return { pageSize: h.readUInt32BE(8) || 65536, salt1: h.readUInt32BE(16), salt2: h.readUInt32BE(20) };
}

/** Frames are read a few at a time (a usual commit is one read), more at a time for a big one. */
const FIRST_READ = 4;
const NEXT_READ = 64;

/**
 * The committed frames of this log generation from `from` on, up to the last commit frame. Frames of the generation
 * carry its salts (older ones left in a reused file do not); frames past the last commit belong to no transaction.
 */
export function readCommitted(fd: number, header: WalHeader, from: number): WalCommit {
  const stride = FRAME_HEADER + header.pageSize;
  const frames: { pgno: number; page: Buffer }[] = [];
  let committed = 0;
  let end = from;
  let dbPages = 0;
  let chunk = Buffer.alloc(0);
  let chunkAt = 0;
  for (let at = Math.max(from, HEADER); ; at += stride) {
    if (at + stride > chunkAt + chunk.length) {
      const buf = Buffer.allocUnsafe(stride * (chunk.length === 0 ? FIRST_READ : NEXT_READ));
      const n = readSync(fd, buf, 0, buf.length, at);
      if (n < stride) break;
      chunk = buf.subarray(0, n - (n % stride));
      chunkAt = at;
    }
    const o = at - chunkAt;
    if (chunk.readUInt32BE(o + 8) !== header.salt1 || chunk.readUInt32BE(o + 12) !== header.salt2) break;
    frames.push({ pgno: chunk.readUInt32BE(o), page: chunk.subarray(o + FRAME_HEADER, o + stride) });
    const commitSize = chunk.readUInt32BE(o + 4);
    if (commitSize !== 0) {
      committed = frames.length;
      end = at + stride;
      dbPages = commitSize;
    }
  }
  frames.length = committed;
  return { end, dbPages, frames };
}
