// The real product (startProduct: every part in one process) serves accounts and apps.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct } from './helpers/product.ts';

test('npm start wiring: /_account is mounted, /verify is 401 without a session, login redirects to the dev provider', async () => {
  const p = await startProduct();
  try {
    const v = await p.call('/web/_account/verify');
    assert.equal(v.status, 401);
    assert.equal(v.json.error.code, 'unauthenticated');
    const login = await p.call('/web/_account/login');
    assert.equal(login.status, 302);
    assert.match(String(login.headers.location), /^http:\/\/127\.0\.0\.1:\d+\/auth\?/);
    assert.equal((await p.call('/web/anything')).status, 404);
  } finally {
    await p.close();
  }
});
