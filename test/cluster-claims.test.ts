// src/cluster/claims.ts alone: when a claim nothing was made of is given back (once idle), what waits for that, and
// the limit of unwritten claims per repo. The same through real etcd and nodes: test/cluster-unclaim.test.ts,
// test/cluster-etcd-cost.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Claims, UNWRITTEN_PER_REPO } from '../src/cluster/claims.ts';

const IDLE = 30;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function harness() {
  const files = new Set<string>();
  const releases: { key: string; done: () => void }[] = [];
  const claims = new Claims((key) => new Promise<void>((done) => releases.push({ key, done })), (key) => files.has(key), IDLE);
  return { claims, files, releases };
}

test('the last admitted write over, with nothing made, gives the claim back once idle; not before, and not twice', async () => {
  const { claims, releases } = harness();
  await claims.enter('o/r/a');
  await claims.enter('o/r/a');
  claims.claimed('o/r/a');
  claims.leave('o/r/a');
  claims.leave('o/r/a');
  assert.equal(releases.length, 0, 'not on the failing write\'s time');
  await sleep(IDLE * 3);
  assert.deepEqual(releases.map((r) => r.key), ['o/r/a']);
  releases[0]!.done();
  await sleep(1);
  await claims.enter('o/r/a');
  claims.leave('o/r/a');
  await sleep(IDLE * 3);
  assert.equal(releases.length, 1, 'given back once: no claim to give back now');
});

test('a loop of failing writes keeps the claim: each write puts the give-back off', async () => {
  // Its own idle time, ten times the writes' spacing, and releases that end at once: a loaded machine that sleeps
  // past the idle time shows as a failed assertion, never as an `enter` waiting for ever on a release nobody ends.
  const idle = 300;
  const released: string[] = [];
  const claims = new Claims(async (key) => void released.push(key), () => false, idle);
  await claims.enter('o/r/a');
  claims.claimed('o/r/a');
  claims.leave('o/r/a');
  const started = performance.now();
  for (let i = 0; i < 8; i++) {
    await sleep(idle / 10);
    await claims.enter('o/r/a');
    claims.leave('o/r/a');
  }
  assert.deepEqual(released, [], `kept through 8 writes over ${Math.round(performance.now() - started)} ms, each within ${idle} ms of the last`);
  await sleep(idle * 3);
  assert.deepEqual(released, ['o/r/a']);
  claims.close();
});

test('a claim something was made of is kept; so is a database this node did not claim', async () => {
  const { claims, files, releases } = harness();
  await claims.enter('o/r/made');
  claims.claimed('o/r/made');
  files.add('o/r/made');
  claims.leave('o/r/made');
  await claims.enter('o/r/other');
  claims.leave('o/r/other');
  await sleep(IDLE * 3);
  assert.equal(releases.length, 0);
  assert.equal(claims.isUnwritten('o/r/made'), false);
});

test('a write arriving during a release waits for it, and is counted before any other release can start', async () => {
  const { claims, releases } = harness();
  await claims.enter('o/r/a');
  claims.claimed('o/r/a');
  claims.leave('o/r/a');
  await sleep(IDLE * 3);
  assert.equal(releases.length, 1);
  let admitted = false;
  const waiting = claims.enter('o/r/a').then(() => (admitted = true));
  await sleep(10);
  assert.equal(admitted, false, 'held while the claim is given back');
  releases[0]!.done();
  await waiting;
  claims.claimed('o/r/a'); // it claimed the database again
  await claims.enter('o/r/a'); // a second write, behind nothing
  claims.leave('o/r/a');
  await sleep(IDLE * 3);
  assert.equal(releases.length, 1, 'the write admitted after the release still counts: no second release yet');
  claims.leave('o/r/a');
  await sleep(IDLE * 3);
  assert.equal(releases.length, 2);
});

test('a release that fails lets the waiting writes go (they are admitted afresh)', async () => {
  const claims = new Claims(() => Promise.reject(new Error('etcd away')), () => false, IDLE);
  await claims.enter('o/r/a');
  claims.claimed('o/r/a');
  claims.leave('o/r/a');
  await sleep(IDLE * 3);
  await claims.enter('o/r/a'); // does not throw, does not hang
  claims.leave('o/r/a');
  claims.close();
});

test('a placement found still this node\'s after its give-back is given back again once idle', async () => {
  const { claims, releases } = harness();
  await claims.enter('o/r/a');
  claims.claimed('o/r/a');
  claims.leave('o/r/a');
  await sleep(IDLE * 3);
  assert.equal(releases.length, 1);
  claims.claimed('o/r/a'); // what unclaim does when the txn did not apply (a stale view) and nothing was made
  releases[0]!.done();
  await sleep(IDLE * 3);
  assert.equal(releases.length, 2, 'tried again');
  claims.close();
});

test('UNWRITTEN_PER_REPO claims per repo, counted while their txn is under way; a failed txn or a write frees a slot; other repos unaffected', async () => {
  const { claims, files } = harness();
  for (let i = 0; i < UNWRITTEN_PER_REPO; i++) assert.equal(claims.reserve(`o/r/n${i}`), true);
  assert.equal(claims.isUnwritten('o/r/n0'), true, 'under way counts as unwritten');
  assert.equal(claims.reserve('o/r/more'), false);
  assert.equal(claims.reserve('o/r/n3'), true, 'the same name again is the same claim');
  assert.equal(claims.reserve('o/other/x'), true);
  claims.claimed('o/r/n0', false); // another node's claim won
  assert.equal(claims.reserve('o/r/more'), true);
  assert.equal(claims.reserve('o/r/more2'), false);
  await claims.enter('o/r/n1');
  claims.claimed('o/r/n1');
  files.add('o/r/n1');
  claims.leave('o/r/n1'); // its first write made it
  assert.equal(claims.reserve('o/r/more2'), true);
  claims.close();
});

test('giveBackNow: an idle unwritten claim goes at once, one with a write admitted stays', async () => {
  const { claims, releases } = harness();
  await claims.enter('o/r/a');
  claims.claimed('o/r/a');
  assert.equal(claims.giveBackNow('o/r/a'), false, 'a write is admitted');
  claims.leave('o/r/a');
  assert.equal(claims.giveBackNow('o/r/a'), true);
  assert.equal(releases.length, 1);
  await sleep(IDLE * 3);
  assert.equal(releases.length, 1, 'its idle wait was cancelled');
});
