// A mirror that fails, as its operator sees it through the product: what status says, and how soon delivery resumes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct } from './helpers/product.ts';
import { newSecret, Receiver, waitFor } from './helpers/mirror.ts';

const mirrorsEnv = (url: string) => JSON.stringify([{ name: 'replica', url, secret: newSecret() }]);

test('a mirror\'s reply with terminal colours and links shows in status as its words only, no escape fragments', async (t) => {
  const receiver = await new Receiver().start();
  const p = await startProduct({ DB_MIRRORS: mirrorsEnv(receiver.url), DB_MIRROR_MAX_BACKOFF_MS: '100' });
  t.after(async () => {
    await p.close();
    await receiver.stop();
  });
  // What a framework's development error page or a colouring logger in front of the hook may answer.
  receiver.behaviour = (_req, res) => void res.writeHead(503).end('\x1b[1;31mdown\x1b[0m for \x1b]8;;https://status.example\x07maintenance\x1b]8;;\x07\r\n');
  await p.db('web', 'execute', { sql: 'CREATE TABLE t (id INTEGER PRIMARY KEY)' });
  await waitFor(async () => (await p.db('web', 'status', {})).json.mirrors[0].lastError !== null, 5000, 'a failure');
  assert.equal((await p.db('web', 'status', {})).json.mirrors[0].lastError, 'HTTP 503: down for maintenance');
});
