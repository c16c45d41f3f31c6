// The service's view of one executor process. It answers in the order it was asked, so the oldest unanswered
// message is the one running; when the process dies, every later message had not started and can run elsewhere.
import { spawn, type ChildProcess } from 'node:child_process';
import { setPriority } from 'node:os';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { encodeFrame, FrameDecoder, type Frame } from './protocol.ts';
import type { ExecutorLimits } from './handles.ts';
import { compileCacheDir } from '../../shared/compile-cache.js';
import { TempSpaceMeter } from './temp-space.ts';
import { MemoryMeter } from './memory.ts';
import { forgetExecutor, watchExecutor } from './reaper.ts';

// `.ts` in a checkout; `.js` in an installed package, built into dist/ (Node strips no types under node_modules).
const CHILD = fileURLToPath(new URL(import.meta.url.endsWith('.ts') ? './child.ts' : './child.js', import.meta.url));
/**
 * V8 options for executor processes, which run little JavaScript around SQLite: a smaller heap, collected sooner,
 * and no background compiler or GC threads; after 10,000 databases ~9 MiB less RSS each, no throughput difference
 * measured (docs/performance.md, "Memory (session 3)"). SCOPEBASE_EXECUTOR_NODE_ARGS adds options, e.g. `--cpu-prof`.
 */
const nodeArgs = () => ['--optimize-for-size', '--single-threaded', ...(process.env.SCOPEBASE_EXECUTOR_NODE_ARGS ?? '').split(' ').filter(Boolean)];

let env: NodeJS.ProcessEnv | undefined;

/** With a warm compile cache Node runs our TypeScript without loading its type stripper: ~17 MB less per process, and a faster start. */
function childEnv(): NodeJS.ProcessEnv {
  if (env) return env;
  const dir = compileCacheDir();
  env = { ...process.env };
  if (dir) env.NODE_COMPILE_CACHE = dir;
  // glibc keeps an arena per thread that ever called malloc, each holding on to freed memory; two are enough here.
  env.MALLOC_ARENA_MAX ??= '2';
  return env;
}

/** The nice value of a process running a slow statement. */
const NICE_SLOW = 10;
/** How long a child may take to load before it is judged stuck (a loaded machine can take seconds). */
const STARTUP_MS = 30_000;
/**
 * What a message may take after its COMMIT (the child says `committed`): its reply is copied and sent, and no
 * statement runs. A kill then only turns a committed write into a 503 `committed: true`, so this stops only a
 * process hung for good.
 */
const AFTER_COMMIT_MS = 60_000;

/**
 * Why a message got no reply: it was running when the process was stopped (at its time limit, for its temporary
 * files: `temp_space`, for the memory it added: `memory`) or died, or it never started.
 */
export type LostReason = 'timeout' | 'temp_space' | 'memory' | 'crash' | 'unstarted';
/** The limits a process is stopped for, besides its time limit. */
export type SizeLimit = 'temp_space' | 'memory';

export class LostError extends Error {
  readonly reason: LostReason;
  /** For `temp_space` and `memory`: the limit that was crossed (DB_TEMP_MAX_BYTES, DB_MEMORY_MAX_BYTES). */
  readonly limitBytes: number | undefined;
  /** For `timeout`: the step that ran out was one statement held to its own limit, not the message's whole budget. */
  readonly statement: boolean;

  constructor(reason: LostReason, limitBytes?: number, statement = false) {
    super(`executor message lost: ${reason}`);
    this.reason = reason;
    this.limitBytes = limitBytes;
    this.statement = statement;
  }
}

interface Pending {
  seq: number;
  budgetMs: number;
  /** Its running step is one statement of it (an imported SQL text's), held to the statement limit. */
  statement?: boolean;
  /** The caller's job, so a scheduler can see what waits behind a slow statement. */
  tag: unknown;
  resolve: (f: Frame) => void;
  reject: (e: LostError) => void;
}

export class ExecutorProcess {
  private readonly child: ChildProcess;
  private readonly channel: Socket;
  private readonly decoder = new FrameDecoder();
  private readonly queue: Pending[] = [];
  private head = 0;
  private seq = 0;
  /** When the message at the head of the queue started running (the previous one's reply, or its send). */
  private headStartedAt = 0;
  /** Why this process was stopped on purpose, if it was: the reason its running message was lost. */
  private killedFor: 'timeout' | SizeLimit | null = null;
  /** What was wrong with the frame it was stopped for sending (a bug in the child), if it was. */
  private malformed: string | null = null;
  private readonly limits: ExecutorLimits;
  private readonly tempSpace: TempSpaceMeter | null;
  private readonly memory: MemoryMeter | null;
  alive = true;
  /** close() has begun: it takes no new work (a message sent now might never be answered). */
  closing = false;
  private dead = false;
  /** The child has loaded and said so: until then nothing it was sent is running, so no budget is spent. */
  private ready = false;
  readonly spawnedAt = performance.now();
  /** Interactive transactions held open on this process (it is not retired while any are). */
  pins = 0;
  /** Their repos (tenant keys), with how many each holds. */
  readonly pinnedBy = new Map<string, number>();
  /** Pinned by a repo while others held it too, for want of a process of its own: open to every repo's work. */
  shared = false;
  /** Lowered in priority while it runs a slow statement; `retire` once it could not be raised again. */
  niced = false;
  retire = false;
  /** A moving average of how long its messages run, in ms (how deep reads may be pipelined to it). */
  serviceMs = 0;
  /** When it last had nothing in flight (its spawn, or its last reply). */
  idleSince = performance.now();

  private readonly onDeath: (p: ExecutorProcess) => void;
  private readonly onReply: () => void;

  constructor(limits: ExecutorLimits, onDeath: (p: ExecutorProcess) => void, onReply: () => void) {
    this.onDeath = onDeath;
    this.onReply = onReply;
    this.limits = limits;
    // SQLite reads SQLITE_TMPDIR when it starts: its temporary files go where DATA_DIR is, not to /tmp or /var/tmp.
    const env = limits.tempDir === undefined ? childEnv() : { ...childEnv(), SQLITE_TMPDIR: limits.tempDir };
    this.child = spawn(process.execPath, [...nodeArgs(), CHILD, JSON.stringify(limits)], { stdio: ['ignore', 'inherit', 'inherit', 'pipe'], env });
    // A failed spawn (EAGAIN, ENOMEM, EMFILE) is an 'error' event, on the next tick: heard before anything here can
    // throw, or, unhandled, it would stop the whole server.
    this.child.on('error', () => {
      this.channel?.destroy();
      this.die();
    });
    // Out of file descriptors (EMFILE), Node sets up no pipes at all: refused here (the caller retries at its next tick).
    const channel = this.child.stdio?.[3] as Socket | null | undefined;
    if (!channel) throw new Error('an executor process could not be started: no file descriptor is left for its pipe (EMFILE)');
    this.channel = channel;
    const pid = this.child.pid;
    watchExecutor(pid); // killed if this process dies without stopping it (reaper.ts)
    this.child.once('exit', () => forgetExecutor(pid));
    this.tempSpace = limits.tempMaxBytes === undefined || this.child.pid === undefined ? null : new TempSpaceMeter(this.child.pid, limits.tempMaxBytes);
    this.memory = limits.memoryMaxBytes === undefined || this.child.pid === undefined ? null : new MemoryMeter(this.child.pid, limits.memoryMaxBytes);
    this.channel.on('data', (chunk: Buffer) => {
      let frames: Frame[];
      try {
        frames = this.decoder.push(chunk);
      } catch (e) {
        return this.killForMalformed(e); // thrown from this handler, it was an uncaught exception: every org's server exited
      }
      for (const frame of frames) this.settle(frame);
      if (frames.length) this.onReply();
    });
    this.channel.on('error', () => {}); // a dead peer; handled on close
    // Replies already in the socket are read before the lost ones are counted.
    this.channel.on('close', () => this.die());
    this.child.on('exit', () => {
      if (this.alive && this.channel.destroyed) this.die();
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** The child has loaded: what it was sent runs (until then none of it has begun). */
  get started(): boolean {
    return this.ready;
  }

  /** Messages sent and not yet answered. */
  get inflight(): number {
    return this.queue.length - this.head;
  }

  /** How long the running message has been running, in ms (0 when idle). */
  runningFor(now: number): number {
    return this.inflight === 0 || !this.ready ? 0 : now - this.headStartedAt;
  }

  /** True when the running message is past its budget: the caller stops the process. */
  overBudget(now: number): boolean {
    const p = this.queue[this.head];
    if (p === undefined) return false;
    // A child that never finishes loading is stuck: stopped like a runaway, but only after a generous while.
    if (!this.ready) return now - this.spawnedAt > Math.max(p.budgetMs, STARTUP_MS);
    return now - this.headStartedAt > p.budgetMs;
  }

  cork(): void {
    this.channel.cork();
  }

  uncork(): void {
    this.channel.uncork();
  }

  /** The tags of messages sent but not started (behind the running one). */
  waiting(): unknown[] {
    return this.queue.slice(this.head + 1).map((p) => p.tag);
  }

  send(header: object, body: Buffer | string | undefined, budgetMs: number, tag?: unknown): Promise<Frame> {
    if (!this.alive || this.closing) return Promise.reject(new LostError('unstarted'));
    return this.post(header, body, budgetMs, tag);
  }

  private post(header: object, body: Buffer | string | undefined, budgetMs: number, tag?: unknown): Promise<Frame> {
    const seq = (this.seq = (this.seq % 0xffffffff) + 1); // 0 is the child's ready frame
    return new Promise<Frame>((resolve, reject) => {
      if (this.inflight === 0) this.headStartedAt = performance.now();
      this.queue.push({ seq, budgetMs, tag, resolve, reject });
      this.channel.write(encodeFrame(seq, header, body));
    });
  }

  private settle(frame: Frame): void {
    if (frame.seq === 0) {
      // The running message starts a step with its own limit (a statement of an imported SQL text): its clock too.
      // Once it committed it runs no statement: what is left (its reply copied and sent) is not held to the limit.
      const { budget, committed } = frame.header;
      const running = this.queue[this.head];
      if (committed === true && running !== undefined) running.budgetMs = Math.max(running.budgetMs, AFTER_COMMIT_MS);
      else if (typeof budget === 'number' && running !== undefined) {
        running.budgetMs = budget;
        running.statement = frame.header.statement === true;
      }
      else this.ready = true;
      this.headStartedAt = performance.now();
      return;
    }
    const p = this.queue[this.head];
    if (!p || p.seq !== frame.seq) return; // cannot happen: replies come in order
    this.queue[this.head++] = undefined as unknown as Pending;
    const now = performance.now();
    this.serviceMs += ((now - this.headStartedAt) - this.serviceMs) / 16;
    if (this.head > 1024 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
    this.headStartedAt = now;
    if (this.inflight === 0) this.idleSince = now;
    p.resolve(frame);
  }

  /**
   * A slow statement yields the CPU to quick ones (nice 10); the priority comes back when it ends. Without the
   * privilege to raise it again (CAP_SYS_NICE) the process is retired once idle, and a fresh one takes its place.
   */
  yieldCpu(slow: boolean): void {
    if (slow === this.niced || this.child.pid === undefined || !this.alive) return;
    try {
      setPriority(this.child.pid, slow ? NICE_SLOW : 0);
      this.niced = slow;
    } catch {
      if (!slow) this.retire = true;
      else this.niced = true; // not lowered (a platform without nice): nothing to restore
    }
  }

  /** Why it was stopped on purpose (null: it was not, or not yet). */
  get stoppedFor(): 'timeout' | SizeLimit | null {
    return this.killedFor;
  }

  /** Stops a runaway statement: SIGKILL is the one stop a native SQLite step cannot ignore. */
  killForTimeout(): void {
    if (!this.alive || this.killedFor !== null) return;
    this.killedFor = 'timeout';
    this.child.kill('SIGKILL');
  }

  /**
   * The child sent a frame that cannot be read: nothing more from it can be trusted. Stopped as if it crashed: its
   * running message is lost as a crash's is (a read runs again, a write is probed), the rest run elsewhere.
   */
  private killForMalformed(e: unknown): void {
    if (this.malformed !== null) return;
    this.malformed = e instanceof Error ? e.message.slice(0, 200) : String(e).slice(0, 200);
    this.channel.destroy(); // its 'close' rejects what was in flight (die)
    this.child.kill('SIGKILL');
  }

  /** Why it was replaced, for the log: stopped for a limit, for a malformed frame, or null (it exited by itself). */
  get replacedFor(): { stoppedFor: 'timeout' | SizeLimit | 'malformed' | null; detail?: string } {
    return this.malformed === null ? { stoppedFor: this.killedFor } : { stoppedFor: 'malformed', detail: this.malformed };
  }

  /**
   * The running message, as a token: the same value later means the same message still runs (see overTempSpace).
   * Undefined when nothing runs.
   */
  running(): unknown {
    return this.ready ? this.queue[this.head] : undefined;
  }

  /** The caller's tag of the running message (undefined when nothing runs, or it was sent untagged). */
  runningTag(): unknown {
    return this.ready ? this.queue[this.head]?.tag : undefined;
  }

  /** True when SQLite's temporary files in this process hold more than DB_TEMP_MAX_BYTES (never without a limit). */
  overTempSpace(): boolean {
    return this.alive && this.tempSpace !== null && this.tempSpace.over();
  }

  /**
   * True when the running message has added more than DB_MEMORY_MAX_BYTES to this process (never without a limit).
   * One that added a quarter of it has the process retired once idle: the allocator keeps what it freed.
   */
  overMemory(): boolean {
    if (!this.alive || this.memory === null) return false;
    const over = this.memory.over(this.running());
    if (this.memory.bloated) this.retire = true;
    return over;
  }

  /**
   * Stops the statement whose temporary files crossed DB_TEMP_MAX_BYTES (or whose memory crossed DB_MEMORY_MAX_BYTES),
   * if `running` (from `running()` when it was measured) still runs: its reply may have come in since, and the next
   * message is not the one to blame. Killing the process frees the files (already unlinked) and the memory at once.
   */
  killFor(limit: SizeLimit, running: unknown): void {
    // `running` undefined: measured idle (a transaction's process), and stopped only if still idle.
    if (!this.alive || this.killedFor !== null || this.running() !== running) return;
    this.killedFor = limit;
    this.child.kill('SIGKILL');
  }

  /** The limit it was stopped for, in bytes (DB_MEMORY_MAX_BYTES or DB_TEMP_MAX_BYTES). */
  limitBytes(): number | undefined {
    return this.killedFor === 'memory' ? this.limits.memoryMaxBytes : this.limits.tempMaxBytes;
  }

  private die(): void {
    if (this.dead) return;
    this.dead = true;
    this.alive = false;
    const lost = this.queue.slice(this.head);
    this.queue.length = 0;
    this.head = 0;
    lost.forEach((p, i) => p.reject(new LostError(i > 0 ? 'unstarted' : this.killedFor ?? 'crash', this.limitBytes(), p.statement === true)));
    this.onDeath(this);
  }

  /** Closes every database cleanly and ends the process. */
  async close(): Promise<void> {
    if (!this.alive || this.closing) return;
    this.closing = true;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    await this.post({ op: 'close' }, undefined, 60_000).catch(() => {});
    this.alive = false;
    this.channel.end();
    await Promise.race([exited, new Promise((r) => setTimeout(r, 5000).unref())]);
    if (this.child.exitCode === null) this.child.kill('SIGKILL');
  }
}
