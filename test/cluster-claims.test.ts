// src/cluster/claims.ts alone: when a claim nothing was made of is given back, and what waits for that. The same
// through real etcd and nodes: test/cluster-unclaim.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Claims } from '../src/cluster/claims.ts';

function harness() {
  const files = new Set<string>();
  const releases: { key: string; done: () => void }[] = [];
  const claims = new Claims((key) => new Promise<void>((done) => releases.push({ key, done })), (key) => files.has(key));
  return { claims, files, releases };
}

test('the last admitted write over, with nothing made, gives the claim back; not before, and not twice', async () => {
  const { claims, releases } = harness();
  await claims.enter('a');
  await claims.enter('a');
  claims.claimed('a');
  void claims.leave('a');
  assert.equal(releases.length, 0, 'another write is admitted: the claim is kept');
  const left = claims.leave('a');
  assert.deepEqual(releases.map((r) => r.key), ['a']);
  releases[0]!.done();
  await left;
  await claims.enter('a');
  void claims.leave('a');
  assert.equal(releases.length, 1, 'given back once: no claim to give back now');
});

test('a claim something was made of is kept; so is a database this node did not claim', async () => {
  const { claims, files, releases } = harness();
  await claims.enter('made');
  claims.claimed('made');
  files.add('made');
  await claims.leave('made');
  await claims.enter('other');
  await claims.leave('other');
  assert.equal(releases.length, 0);
  assert.equal(claims.isUnwritten('made'), false);
});

test('a write arriving during a release waits for it, and is counted before any other release can start', async () => {
  const { claims, releases } = harness();
  await claims.enter('a');
  claims.claimed('a');
  void claims.leave('a');
  let admitted = false;
  const waiting = claims.enter('a').then(() => (admitted = true));
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(admitted, false, 'held while the claim is given back');
  releases[0]!.done();
  await waiting;
  claims.claimed('a'); // it claimed the database again
  const second = claims.enter('a'); // a third write, behind nothing
  await second;
  void claims.leave('a');
  assert.equal(releases.length, 1, 'the write admitted after the release still counts: no second release yet');
  void claims.leave('a');
  assert.equal(releases.length, 2);
});

test('a release that fails lets the waiting writes go (they are admitted afresh)', async () => {
  const claims = new Claims(() => Promise.reject(new Error('etcd away')), () => false);
  await claims.enter('a');
  claims.claimed('a');
  await claims.leave('a');
  await claims.enter('a'); // does not throw, does not hang
  await claims.leave('a');
});
