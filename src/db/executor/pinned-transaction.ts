// An interactive transaction runs every message on the one process that holds its connection, and ends exactly once.
import { randomBytes } from 'node:crypto';
import { LostError, type ExecutorProcess } from './process.ts';
import type { Scheduler } from './scheduler.ts';
import { tenantOfPath, transactionLost } from './pool-errors.ts';
import { lostCommit, probeCommitted, probeLater, type LaneProbe } from './commit-probe.ts';
import type { ExecReply, PoolOptions } from './pool.ts';
import type { Scope } from '../contract.ts';
import { ApiError } from '../../shared/errors.ts';

/**
 * A database's write lane held by an interactive transaction: later writes to the database wait behind it, and
 * its messages all run on one executor process (the transaction lives on a connection there).
 */
export interface LaneHold {
  /** The database file does not exist yet: the transaction may create it (the quota was checked). */
  readonly create: boolean;
  /** Runs one message on the transaction's process; a reply with `v` in its header committed that version. */
  run(header: Record<string, unknown>, body?: Buffer, budgetMs?: number): Promise<ExecReply>;
  /** Lets the writes behind it go; call it exactly when the transaction ended (committed, rolled back, or lost). */
  release(): void;
}

/**
 * The transaction's handle: its messages all go to `proc`; `release` unpins it (and lets its lane go: `ended`).
 * `inLane`: the lane's re-probe (WriteLanes.probeInLane) of a transaction creating its database whose probe failed.
 */
export function pinTransaction(
  scheduler: Scheduler, opts: Pick<PoolOptions, 'floor' | 'onCommit' | 'onLateCommit' | 'onError' | 'timeoutMs'>,
  scope: Scope, path: string, proc: ExecutorProcess, created: (() => void) | null, ended: () => void,
  inLane?: (token: string, release: () => void) => LaneProbe,
): LaneHold {
  const tenant = tenantOfPath(path);
  // What every message of the transaction carries: where, whose, and the token a lost commit is probed by.
  const common = { path, scope, create: created !== null, floor: opts.floor(scope), token: randomBytes(12).toString('base64url') };
  // The creation goes to the lane's re-probe, which lets it go once it has removed a file nothing committed to.
  const handOver = (): LaneProbe | undefined => {
    if (created === null || inLane === undefined) return undefined;
    const release = created;
    created = null;
    return inLane(common.token, release);
  };
  let released = false;
  return {
    create: created !== null,
    run: async (header, body, budgetMs = opts.timeoutMs) => {
      if (released) throw new ApiError('invalid_request', 'this transaction has ended');
      try {
        const frame = await scheduler.runOn(proc, tenant, { ...header, ...common }, body, budgetMs);
        const version = frame.header.v as number | undefined;
        if (version !== undefined) opts.onCommit(scope, version);
        return { status: frame.header.s as number, body: frame.body, version };
      } catch (e) {
        // A COMMIT that ran may have committed before the process died: asked. One that never ran did not.
        if (header.op === 'tx.commit' && e instanceof LostError && e.reason !== 'unstarted') throw await lostCommit(scheduler, opts, scope, path, common.token, common.create, handOver);
        // The transaction died with its process. One that was creating its database leaves none (the probe
        // removes it at version 0, or its re-probe), as a first write killed before its commit does; the lane is still held here.
        if (e instanceof LostError && common.create) {
          const probed = await probeCommitted(scheduler, opts.timeoutMs, path, common.token, true).catch(() => null);
          if (probed === null) probeLater(scheduler, opts, scope, path, common.token, 1, handOver());
        }
        throw transactionLost(e, budgetMs, proc, scheduler.closing);
      }
    },
    release: () => {
      if (released) return;
      released = true;
      scheduler.unpin(proc, tenant);
      created?.();
      ended();
    },
  };
}
