// SPEC 9's /metrics (issue 14): request latency per route template (never a raw path, a name or an id), sign-ins
// started, succeeded and failed, and requests to apps by status class — scraped after real requests.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startProduct } from './helpers/product.ts';

test('/metrics: latency histograms per route template, sign-in and app counters', async () => {
  const upstream = createServer((_req, res) => res.end('hello from the app'));
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const p = await startProduct({ APPS: JSON.stringify({ 'acme/site': `http://127.0.0.1:${(upstream.address() as AddressInfo).port}` }) });
  try {
    assert.equal((await p.db('web', 'execute', { sql: 'CREATE TABLE t(x)' })).status, 200);
    assert.equal((await p.db('web', 'query', { database: 'secret-name-1', sql: 'SELECT 1' })).status, 404);
    assert.equal((await p.call('/web/_db/v2/pipeline', { body: { baton: null, requests: [] }, headers: { authorization: `Bearer ${p.secret('acme', 'web')}` } })).status, 200);
    assert.equal((await p.call('/web/_account/login', { method: 'GET' })).status, 302, 'a sign-in starts');
    assert.equal((await p.call('/web/_account/callback?state=nope', { method: 'GET' })).status, 400, 'and one fails');
    assert.equal((await p.call('/site/some/page-42', { method: 'GET' })).status, 200);
    assert.equal((await p.call('/web/', { method: 'GET', headers: { accept: 'text/html' } })).status, 200, 'the landing page');
    const text = await (await fetch(`${p.running.adminUrl}/metrics`)).text();
    const count = (labels: string) => Number(text.split('\n').find((l) => l.startsWith(`scopebase_http_request_duration_seconds_count{${labels}} `))?.split(' ')[1] ?? 0);
    assert.equal(count('route="/:repo/_db/execute",method="POST",status="2xx"'), 1);
    assert.equal(count('route="/:repo/_db/query",method="POST",status="4xx"'), 1);
    assert.equal(count('route="/:repo/_db/pipeline",method="POST",status="2xx"'), 1);
    assert.equal(count('route="/:repo/_account/login",method="GET",status="3xx"'), 1);
    assert.ok(count('route="/:repo/*",method="GET",status="2xx"') >= 2, 'an app page and the landing page');
    assert.match(text, /scopebase_http_request_duration_seconds_bucket\{le="0\.005",route="\/:repo\/_db\/execute",method="POST",status="2xx"\} \d+/);
    assert.match(text, /^scopebase_sign_ins_total\{outcome="started"\} 1$/m);
    assert.match(text, /^scopebase_sign_ins_total\{outcome="failed"\} 1$/m);
    assert.match(text, /^scopebase_app_requests_total\{status="2xx"\} 2$/m);
    for (const leak of ['secret-name-1', 'page-42', 'route="/web', 'state=nope']) assert.ok(!text.includes(leak), `no raw path in a label: ${leak}`);
  } finally {
    await p.close();
    upstream.close();
  }
});
