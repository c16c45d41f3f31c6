// The reference mirror's pull (SPEC 6, a minVersion read catching up from the source's /_db/changes) takes only events
// of the database it asked for: a gateway at MIRROR_SOURCE_URL answering with another database's page wrote them into
// the asked replica.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { createServer as createHttpServer } from 'node:http';
import { ApiError } from '../src/shared/errors.ts';
import { fetchChanges } from '../src/mirror/reference/snapshot.ts';
import { startProduct } from './helpers/product.ts';

test('a page of the source\'s change log naming another database is refused, not applied to the replica asked for', async () => {
  const p = await startProduct();
  try {
    assert.equal((await p.db('web', 'execute', { database: 'a', sql: 'CREATE TABLE t(x)' })).status, 200);
    const page = await p.db('web', 'changes', { database: 'a', since: 0 });
    assert.equal(page.status, 200, page.text);
    // A misrouting gateway: whatever is asked, database a's page.
    const wrong = createHttpServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(page.text));
    await new Promise<void>((resolve) => wrong.listen(0, '127.0.0.1', resolve));
    try {
      const source = { url: `http://127.0.0.1:${(wrong.address() as AddressInfo).port}`, baseDomain: 'localhost', rootKey: p.config.rootKeys[0]!, timeoutMs: 5000, maxBytes: 1 << 20 };
      const own = await fetchChanges(source, { org: 'acme', repo: 'web', database: 'a' }, 0);
      assert.ok('events' in own && own.events.length === 1, 'the page of the database asked for is taken');
      await assert.rejects(fetchChanges(source, { org: 'acme', repo: 'web', database: 'b' }, 0), (e: unknown) => e instanceof ApiError && e.code === 'unavailable' && /another database/.test(e.message));
    } finally {
      wrong.close();
    }
  } finally {
    await p.close();
  }
});
