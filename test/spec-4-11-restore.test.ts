// SPEC 4.11 from the outside: restore by version and by time, dry runs, the reply, the restore as a new version with a
// database.restored event, a version not reached, and status's history. (410 past the window: db-restore.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';

let p: Product;
const times: string[] = [];
before(async () => {
  p = await startProduct();
  assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(a)' })).status, 200);
  for (let i = 1; i <= 3; i++) {
    await new Promise((r) => setTimeout(r, 15));
    assert.equal((await p.db('web', 'execute', { sql: 'INSERT INTO t VALUES (?)', params: [i] })).status, 200);
  }
  const events = (await p.db('web', 'changes', { since: 0 })).json.events;
  for (const e of events) times[e.version] = e.committedAt;
});
after(() => p.close());

const rows = async (): Promise<unknown> => (await p.db('web', 'query', { sql: 'SELECT a FROM t ORDER BY a' })).json.results[0].rows;

test('a dry run names what it would restore and changes nothing', async () => {
  const r = await p.db('web', 'restore', { toVersion: 2, dryRun: true });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { restoredTo: { version: 2, committedAt: times[2] }, version: 4, dryRun: true });
  assert.deepEqual(await rows(), [[1], [2], [3]]);
});

test('toVersion: the database holds exactly that version\'s content, as a new version, with a database.restored event', async () => {
  const r = await p.db('web', 'restore', { toVersion: 2 });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { restoredTo: { version: 2, committedAt: times[2] }, version: 5, dryRun: false });
  assert.deepEqual(await rows(), [[1]]);
  const e = (await p.db('web', 'changes', { since: 4 })).json.events;
  assert.equal(e.length, 1);
  assert.deepEqual([e[0].type, e[0].operation, e[0].restoredVersion, e[0].changeset, e[0].version, e[0].previousVersion], ['database.restored', 'restore', 2, null, 5, 4]);
});

test('toTime: the last version committed at or before that time', async () => {
  const at = await p.db('web', 'restore', { toTime: times[3] });
  assert.equal(at.status, 200, at.text);
  assert.equal(at.json.restoredTo.version, 3);
  assert.deepEqual(await rows(), [[1], [2]]);
  const between = new Date(Date.parse(times[4]!) - 1).toISOString();
  const r = await p.db('web', 'restore', { toTime: between, dryRun: true });
  assert.equal(r.json.restoredTo.version, Date.parse(times[3]!) <= Date.parse(between) ? 3 : 2);
  const undo = await p.db('web', 'restore', { toVersion: 4 });
  assert.equal(undo.status, 200, undo.text);
  assert.deepEqual(await rows(), [[1], [2], [3]]);
});

test('a version not yet reached, or a time in the future past the last commit, or bad shapes: 400 invalid_request', async () => {
  const v = (await p.db('web', 'status', {})).json.version;
  assertSpecError(await p.db('web', 'restore', { toVersion: v + 1 }), 400, 'invalid_request');
  for (const body of [{}, { toVersion: -1 }, { toVersion: '2' }, { toVersion: 1, toTime: times[1] }, { toTime: 'yesterday' }, { toVersion: 1, dryRun: 'yes' }]) {
    assertSpecError(await p.db('web', 'restore', body), 400, 'invalid_request', JSON.stringify(body));
  }
  assertSpecError(await p.db('web', 'restore', { database: 'nope', toVersion: 0 }), 404, 'database_not_found');
});

test('a time before the first version kept: 410 gone naming the oldest restorable version and time; status shows history', async () => {
  const s = (await p.db('web', 'status', {})).json;
  assert.equal(s.history.oldestVersion, 0);
  const before = new Date(Date.parse(s.history.oldestTime) - 60_000).toISOString();
  const e = assertSpecError(await p.db('web', 'restore', { toTime: before }), 410, 'gone');
  assert.equal(e.details?.oldestVersion, 0, JSON.stringify(e));
  assert.equal(e.details?.oldestTime, s.history.oldestTime);
});

test('toVersion 0 is the empty database it was created as; a toTime with an offset is that instant', async () => {
  const r = await p.db('web', 'restore', { toVersion: 0, dryRun: true });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.restoredTo.version, 0);
  const t3 = new Date(Date.parse(times[3]!));
  const shifted = new Date(t3.getTime() + 2 * 3600_000).toISOString().replace('Z', '+02:00');
  const at = await p.db('web', 'restore', { toTime: shifted, dryRun: true });
  assert.equal(at.status, 200, at.text);
  assert.equal(at.json.restoredTo.version, 3);
  const future = await p.db('web', 'restore', { toTime: new Date(Date.now() + 3600_000).toISOString(), dryRun: true });
  assert.equal(future.status, 200, future.text);
  assert.equal(future.json.restoredTo.version, (await p.db('web', 'status', {})).json.version, 'the last version committed before that time');
});
