// Least-loaded placement of new databases (src/cluster/placement.ts leastLoaded): the live node with the fewest
// primaries, ties by rendezvous hashing of the name. The same rule through real etcd and nodes: test/cluster.test.ts.
// And the view of placement a node reads from a real etcd (PlacementWatch): a read it asks for holds its own writes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { leastLoaded, PLACEMENT, PlacementWatch, type Placement, type View } from '../src/cluster/placement.ts';
import { Etcd } from '../src/cluster/etcd.ts';
import { startEtcd } from './helpers/etcd.ts';

function view(nodes: string[], primaries: Record<string, string> = {}): View {
  const placements = new Map<string, Placement>(Object.entries(primaries).map(([key, primary], i) => [key, { primary, follower: null, epoch: i + 1 }]));
  return { revision: 1, nodes: new Map(nodes.map((n) => [n, `http://${n}`])), nodeLeases: new Map(), placements, leaders: new Map(), leaderTerms: new Map(), moves: new Map() };
}

test('the live node with the fewest primaries gets a new database; databases sent but not placed yet count', () => {
  const v = view(['n1', 'n2', 'n3'], { 'a/b/1': 'n1', 'a/b/2': 'n1', 'a/b/3': 'n2' });
  assert.equal(leastLoaded(v, 'a/b/new'), 'n3');
  assert.equal(leastLoaded(v, 'a/b/new', ['n3', 'n3']), 'n2');
  assert.equal(leastLoaded(view([]), 'a/b/new'), null, 'no live node: nowhere');
});

test('nodes that are not alive count for nothing, and take nothing', () => {
  const v = view(['n1', 'n2'], { 'a/b/1': 'n9', 'a/b/2': 'n9', 'a/b/3': 'n1' });
  assert.equal(leastLoaded(v, 'a/b/new', ['n9']), 'n2');
});

test('ties: the same answer for the same view (two proxies agree), names spread over the nodes', () => {
  const v = view(['n1', 'n2', 'n3']);
  const per = new Map<string, number>();
  for (let i = 0; i < 300; i++) {
    const node = leastLoaded(v, `acme/web/db${i}`)!;
    assert.equal(leastLoaded(v, `acme/web/db${i}`), node);
    per.set(node, (per.get(node) ?? 0) + 1);
  }
  for (const n of ['n1', 'n2', 'n3']) assert.ok((per.get(n) ?? 0) > 60, `${n} is first for a fair share of names: ${JSON.stringify([...per])}`);
});

test('a burst of new databases from one proxy spreads evenly', () => {
  const v = view(['n1', 'n2', 'n3'], { 'a/b/old': 'n2' });
  const sent: string[] = [];
  for (let i = 0; i < 29; i++) sent.push(leastLoaded(v, `acme/web/burst${i}`, sent)!);
  const count = (n: string) => sent.filter((s) => s === n).length + (n === 'n2' ? 1 : 0);
  assert.deepEqual(['n1', 'n2', 'n3'].map(count), [10, 10, 10]);
});

test('a refresh asked for while a read is under way reads again after it: what the caller wrote before is in its view', async (t) => {
  const server = await startEtcd();
  const etcd = new Etcd([server.url]);
  t.after(async () => {
    await etcd.close();
    await server.stop();
  });
  // The first read has read etcd and is held in its view callback, as a node's may be, while a placement is claimed.
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let reads = 0;
  const watch = new PlacementWatch(etcd, 60_000, async () => {
    if (++reads === 1) await held;
  });
  const underWay = watch.refresh();
  while (reads === 0) await new Promise((r) => setTimeout(r, 5));
  await etcd.put(`${PLACEMENT}acme/web/new`, JSON.stringify({ primary: 'n1', follower: null }));
  const after = watch.refresh();
  release();
  assert.equal((await underWay).placements.has('acme/web/new'), false, 'the read under way began before the claim');
  assert.equal((await after).placements.get('acme/web/new')?.primary, 'n1', 'a claim is seen by the refresh that follows it');
});
