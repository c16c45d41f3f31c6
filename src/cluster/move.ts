// `scopebase cluster move`: asks for a live move in etcd and follows it until the target is the primary. The
// database's primary carries it out (node.ts, handOver): follower first, brought in line, then the handover.
import type { Scope } from '../db/contract.ts';
import { Etcd } from './etcd.ts';
import { MOVE, ROOT, scopeKey, type View } from './placement.ts';
import { PlacementWatch } from './placement.ts';

export class MoveError extends Error {}

export async function moveDatabase(endpoints: string[], scope: Scope, to: string, progress: (line: string) => void, timeoutMs = 120_000): Promise<{ epoch: number }> {
  const etcd = new Etcd(endpoints);
  const watch = new PlacementWatch(etcd, 200);
  const key = scopeKey(scope);
  try {
    let view: View = await watch.refresh();
    const p = view.placements.get(key);
    if (!p) throw new MoveError(`${key} is not placed in this cluster (it has never been written)`);
    if (!view.nodes.has(to)) throw new MoveError(`node ${to} is not alive in this cluster (live: ${[...view.nodes.keys()].sort().join(', ') || 'none'})`);
    if (p.primary === to) {
      progress(`${key} is already on ${to}`);
      return { epoch: p.epoch };
    }
    progress(`${key}: primary ${p.primary}, follower ${p.follower ?? 'none'}; moving to ${to}`);
    await etcd.put(`${MOVE}${key}`, to);
    let said = '';
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      view = await watch.refresh();
      const now = view.placements.get(key);
      if (now === undefined) throw new MoveError(`${key} is no longer placed: a new database nothing was written to is given back (its placement and the move request with it)`);
      const line = now.primary === to ? `done: ${to} is the primary (epoch ${now.epoch}), ${now.follower} its follower`
        : now.follower === to ? `${to} is the follower; copying and handing over` : `waiting for ${now.primary} to start`;
      if (line !== said) progress((said = line));
      if (now.primary === to) return { epoch: now.epoch };
      if (performance.now() > deadline) throw new MoveError(`the move did not finish in ${Math.round(timeoutMs / 1000)} s; it goes on (${ROOT}move/${key} in etcd)`);
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await etcd.close();
  }
}
