// Issue 14: the OpenAPI 3.1 document at /_scopebase/openapi.json (every org host and the admin port) describes exactly
// the routes the running product serves: compared with the live Fastify route tables, none missing and none extra.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startProduct, type Product } from './helpers/product.ts';
import { request } from 'undici';
import { routeTable } from '../src/shared/http.ts';

let p: Product;
before(async () => {
  p = await startProduct();
});
after(() => p.close());

/** Methods an OpenAPI path item can name; HEAD is left out (Fastify answers HEAD for every GET by itself). */
const OPENAPI_METHODS = ['get', 'post', 'put', 'patch', 'delete', 'options', 'trace'];
const normalize = (route: string) => (route.length > 1 ? route.replace(/\/$/, '') : route);

test('served on every org host and on the admin port, the same document, naming the servers it was asked on', async () => {
  const acme = await p.call('/_scopebase/openapi.json');
  const globex = await p.call('/_scopebase/openapi.json', { org: 'globex' });
  const admin = await (await fetch(`${p.running.adminUrl}/_scopebase/openapi.json`)).json();
  assert.equal(acme.status, 200);
  assert.match(String(acme.headers['content-type']), /^application\/json/);
  assert.equal(acme.json.openapi, '3.1.0');
  const port = new URL(p.url).port;
  const at = (doc: { servers: unknown[]; paths: Record<string, { servers?: unknown }> }) => ({ org: doc.servers, admin: doc.paths['/healthz']!.servers });
  const body = (doc: object) => JSON.stringify({ ...doc, servers: null, paths: Object.fromEntries(Object.entries((doc as { paths: object }).paths).map(([k, v]) => [k, { ...v, servers: null }])) });
  assert.equal(body(globex.json), body(acme.json));
  assert.equal(body(admin), body(acme.json));
  // It said http://{org}.localhost:8080 and http://127.0.0.1:9090 whatever this instance's PORT, ADMIN_PORT, BASE_DOMAIN.
  const org = (name: string) => [{ url: `http://{org}.localhost:${port}`, description: 'an org host: {org}.{BASE_DOMAIN}', variables: { org: { default: name } } }];
  assert.deepEqual(at(acme.json).org, org('acme'));
  assert.deepEqual(at(globex.json).org, org('globex'));
  assert.deepEqual(at(admin).admin, [{ url: p.running.adminUrl, description: 'ADMIN_PORT (keep it private)' }]);
});

test('the document lists exactly the routes the live product serves', async () => {
  const doc = (await p.call('/_scopebase/openapi.json')).json;
  const documented = new Set<string>();
  for (const [path, pathItem] of Object.entries<Record<string, unknown>>(doc.paths)) {
    const route = pathItem['x-scopebase-route'];
    assert.equal(typeof route, 'string', `${path} names the route serving it`);
    for (const method of OPENAPI_METHODS) if (pathItem[method]) documented.add(`${method.toUpperCase()} ${normalize(route as string)}`);
  }
  const served = new Set<string>();
  for (const server of [p.running.servers.main, p.running.servers.admin]) {
    for (const line of routeTable(server)) {
      const [method, route] = line.split(' ') as [string, string];
      if (OPENAPI_METHODS.includes(method.toLowerCase())) served.add(`${method} ${normalize(route)}`);
    }
  }
  assert.ok(served.size > 20, 'the route tables were read');
  assert.deepEqual([...served].filter((r) => !documented.has(r)).sort(), [], 'served but not documented');
  assert.deepEqual([...documented].filter((r) => !served.has(r)).sort(), [], 'documented but not served');
});

test('every path template variable is declared as a parameter', async () => {
  const doc = (await p.call('/_scopebase/openapi.json')).json;
  for (const [path, pathItem] of Object.entries<Record<string, unknown>>(doc.paths)) {
    const declared = ((pathItem.parameters ?? []) as { $ref?: string; name?: string }[]).map((x) => x.name ?? x.$ref!.split('/').pop());
    for (const [, name] of path.matchAll(/\{([^}]+)\}/g)) assert.ok(declared.includes(name), `${path}: {${name}} is declared`);
    for (const ref of declared) assert.ok(doc.components.parameters[ref!], `${path}: parameter ${ref} exists`);
  }
});

test('/_scopebase/* answers in SPEC 3\'s shape: the document takes GET, other paths are no route (not a repo named _scopebase)', async () => {
  for (const method of ['OPTIONS', 'POST', 'PUT', 'PATCH', 'DELETE', 'TRACE']) {
    const proxy = await p.call('/_scopebase/openapi.json', { method });
    const admin = await request(`${p.running.adminUrl}/_scopebase/openapi.json`, { method: method as 'GET' });
    for (const [where, status, allow, body] of [['proxy', proxy.status, proxy.headers.allow, proxy.json], ['admin', admin.statusCode, admin.headers.allow, await admin.body.json() as typeof proxy.json]] as const) {
      assert.equal(status, 404, `${method} on the ${where}`);
      assert.equal(body.error.code, 'not_found');
      assert.equal(body.error.message, `/_scopebase/openapi.json takes GET (or HEAD), not ${method}`);
      assert.equal(allow, 'GET, HEAD');
    }
  }
  assert.equal((await p.call('/_scopebase/openapi.json', { method: 'HEAD' })).status, 200);
  for (const path of ['/_scopebase', '/_scopebase/', '/_scopebase/db-channel', '/_scopebase/openapi.yaml']) {
    for (const method of ['GET', 'POST']) {
      const r = await p.call(path, { method });
      assert.equal(r.status, 404, `${method} ${path}: ${r.text}`);
      assert.equal(r.json.error.code, 'not_found');
      assert.match(r.json.error.message, /^no route for .*: the product's own paths are under \/_scopebase\/, and the one served is GET \/_scopebase\/openapi\.json$/);
    }
  }
});
