// A page of /_db/changes (and of a cluster's shipment, src/cluster/shipper.ts) is bounded in bytes as well as in
// events: 1,000 events of 1 MiB changesets made one text longer than V8 allows, and 256 of them a shipment larger
// than a follower accepts (it then never caught up). In-process on the executor's own handle.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { DbHandle } from '../src/db/executor/handles.ts';
import { changes, CHANGES_PAGE_BYTES } from '../src/db/executor/read-ops.ts';
import { tempDir } from './helpers/product.ts';

test('a page of events stops near its byte bound, one event at least, and the next page goes on from there', (t) => {
  const dir = tempDir('scopebase-changes-page-');
  const h = new DbHandle(join(dir, 'page.sqlite'), true, { sync: 'normal', maxValueBytes: 1 << 20, maxSizeBytes: 1 << 30, maxResultBytes: 1 << 20, maxOpen: 4, idleCloseMs: 0 });
  t.after(() => {
    h.db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const log = h.internal('INSERT INTO _scopebase_changes (version, committed_at, event) VALUES (?, 0, ?)');
  for (let v = 1; v <= 10; v++) log.run(v, JSON.stringify({ id: `e${v}`, version: v, changeset: 'x'.repeat(1000) }));
  h.internal("UPDATE _scopebase_meta SET value = 10 WHERE key = 'version'").run();
  const page = (since: number, maxBytes?: number) => {
    const r = changes(h, since, 256, { maxBytes });
    assert.equal(r.status, 200, String(r.body));
    return (JSON.parse(String(r.body)) as { events: { version: number }[] }).events.map((e) => e.version);
  };
  assert.deepEqual(page(0), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 'small events: the whole page');
  assert.deepEqual(page(0, 3500), [1, 2, 3]);
  assert.deepEqual(page(3, 3500), [4, 5, 6], 'the next page from the last event it got (the statement was reset)');
  assert.deepEqual(page(0, 10), [1], 'one event even past the bound');
  assert.ok(CHANGES_PAGE_BYTES * 2 < 256 * 1024 * 1024, 'a page, with its JSON around it, fits well in a follower\'s apply body limit');
});
