// SPEC 4.6 from the outside, through the proxy over real HTTP: ids, order, checksums (SHA-256 of the UTF-8 SQL),
// the prefix rule in every way a list can break it, one transaction, dry runs, and the sandbox inside migrations.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startProduct, type Product } from './helpers/product.ts';
import { assertSpecError } from './helpers/spec-error.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

const sha = (sql: string) => createHash('sha256').update(sql, 'utf8').digest('hex');
const migrate = (database: string, migrations: { id: string; sql: string }[], dryRun?: boolean) =>
  p.db('web', 'migrate', { database, migrations, ...(dryRun === undefined ? {} : { dryRun }) });
const status = async (database: string) => (await p.db('web', 'status', { database })).json;

const A = { id: '0001_a', sql: 'CREATE TABLE a(x);' };
const B = { id: '0002_b', sql: 'CREATE TABLE b(y); CREATE INDEX b_y ON b(y);' };
const C = { id: '0003_c', sql: 'INSERT INTO a VALUES (1);' };

describe('ids', () => {
  test('1 to 128 of A-Z a-z 0-9 . _ -: anything else, or a repeated id, is 400 invalid_request and applies nothing', async () => {
    const ok = await migrate('ids', [{ id: 'x'.repeat(128), sql: 'CREATE TABLE t(x);' }, { id: 'A.b_c-9', sql: '' }]);
    assert.equal(ok.status, 200, ok.text);
    for (const id of ['', 'x'.repeat(129), 'a b', 'a/b', 'é', 'a\n', '0001:x']) {
      assertSpecError(await migrate('ids2', [{ id, sql: 'CREATE TABLE t(x);' }]), 400, 'invalid_request', JSON.stringify(id));
    }
    assertSpecError(await migrate('ids2', [{ id: 'same', sql: 'CREATE TABLE t(x);' }, { id: 'same', sql: 'CREATE TABLE u(x);' }]), 400, 'invalid_request', 'twice');
    assert.equal((await status('ids2')).exists, false);
  });
});

describe('order and checksums', () => {
  test('applied in the order given, not sorted by id', async () => {
    const r = await migrate('order', [{ id: 'z_table', sql: 'CREATE TABLE t(x);' }, { id: 'a_row', sql: 'INSERT INTO t VALUES (1);' }]);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.applied, ['z_table', 'a_row']);
    assert.equal((await status('order')).migrations.latest, 'a_row');
  });

  test('the checksum is the SHA-256 of the SQL\'s UTF-8 bytes in lowercase hex: a conflict names the id and both', async () => {
    const first = { id: '0001_utf8', sql: "CREATE TABLE notes(t TEXT DEFAULT 'café ✓ 𝄞');" };
    assert.equal((await migrate('sums', [first])).status, 200);
    const edited = { id: first.id, sql: first.sql.replace('café', 'cafe') };
    const e = assertSpecError(await migrate('sums', [edited]), 409, 'migration_conflict');
    assert.equal(e.details?.id, first.id);
    assert.equal(e.details?.appliedChecksum, sha(first.sql));
    assert.equal(e.details?.requestedChecksum, sha(edited.sql));
    assert.match(e.message, /0001_utf8/);
  });
});

describe('the applied list must be a prefix of the request\'s', () => {
  before(async () => {
    const r = await migrate('prefix', [A, B]);
    assert.equal(r.status, 200, r.text);
  });

  const broken: [string, { id: string; sql: string }[]][] = [
    ['a shorter list (an applied one left out at the end)', [A]],
    ['an empty list', []],
    ['the applied ones in another order', [B, A, C]],
    ['one applied left out in the middle', [A, C]],
    ['another id where an applied one stands', [A, { id: '0002_other', sql: B.sql }, C]],
    ['an applied one with other SQL', [A, { id: B.id, sql: `${B.sql}\n` }, C]],
  ];
  for (const [what, list] of broken) {
    test(`${what}: 409 migration_conflict naming an applied id and its checksum; nothing applied, dry run or not`, async () => {
      const v = (await status('prefix')).version;
      for (const dryRun of [false, true]) {
        const e = assertSpecError(await migrate('prefix', list, dryRun), 409, 'migration_conflict', what);
        assert.ok([A.id, B.id].includes(e.details?.id as string), `names an applied id: ${JSON.stringify(e.details)}`);
        assert.equal(e.details?.appliedChecksum, sha(e.details?.id === A.id ? A.sql : B.sql));
        assert.ok('requestedChecksum' in (e.details ?? {}), 'names the request\'s checksum too');
      }
      const s = await status('prefix');
      assert.equal(s.version, v);
      assert.deepEqual([s.migrations.applied, s.migrations.latest], [2, B.id]);
    });
  }

  test('the same list again applies nothing and changes nothing', async () => {
    const v = (await status('prefix')).version;
    const r = await migrate('prefix', [A, B]);
    assert.deepEqual(r.json, { applied: [], alreadyApplied: [A.id, B.id], version: v, dryRun: false });
  });
});

describe('one transaction; dry runs', () => {
  test('pending migrations apply all or none, as one new version', async () => {
    assert.equal((await migrate('atomic', [A])).status, 200);
    const v = (await status('atomic')).version;
    const bad = await migrate('atomic', [A, B, C, { id: '0004_bad', sql: 'INSERT INTO nowhere VALUES (1);' }]);
    assertSpecError(bad, 400, 'sql_error');
    const s = await status('atomic');
    assert.equal(s.version, v);
    assert.equal(s.migrations.applied, 1);
    assert.ok(!s.tables.some((t: { name: string }) => t.name === 'b'));
    const good = await migrate('atomic', [A, B, C]);
    assert.deepEqual(good.json, { applied: [B.id, C.id], alreadyApplied: [A.id], version: v + 1, dryRun: false });
  });

  test('dryRun: the same shape, what would be applied, nothing changed; and it fails exactly where the real run fails', async () => {
    const dry = await migrate('dry', [A, B], true);
    assert.deepEqual(dry.json, { applied: [A.id, B.id], alreadyApplied: [], version: 0, dryRun: true });
    assert.equal((await status('dry')).exists, false);
    assert.equal((await migrate('dry', [A])).status, 200);
    const dry2 = await migrate('dry', [A, B, C], true);
    assert.deepEqual(dry2.json, { applied: [B.id, C.id], alreadyApplied: [A.id], version: 1, dryRun: true });
    const s = await status('dry');
    assert.deepEqual([s.version, s.migrations.applied], [1, 1]);
    const failing = [A, B, { id: '0003_fk', sql: 'CREATE TABLE c(x); INSERT INTO nope VALUES (1);' }];
    const dryFail = await migrate('dry', failing, true);
    const realFail = await migrate('dry', failing);
    assert.equal(dryFail.status, realFail.status);
    assert.deepEqual(dryFail.json.error.code, realFail.json.error.code);
    assert.deepEqual(dryFail.json.error.details, realFail.json.error.details);
  });
});

describe('the sandbox holds inside migrations (SPEC 4.8)', () => {
  for (const sql of ["ATTACH DATABASE 'x.db' AS x;", 'BEGIN;', 'COMMIT;', 'CREATE TEMP TABLE t(x);', 'PRAGMA journal_mode = DELETE;', 'CREATE TABLE _scopebase_mine(x);']) {
    test(`${sql} is 400 not_allowed and nothing of the migration stays`, async () => {
      const r = await migrate('sandboxed', [{ id: '0001_ok', sql: 'CREATE TABLE fine(x);' }, { id: '0002_refused', sql: `CREATE TABLE partial(x); ${sql}` }]);
      assertSpecError(r, 400, 'not_allowed', sql);
      assert.equal((await status('sandboxed')).exists, false);
    });
  }
});
