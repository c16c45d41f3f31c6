// SPEC 7.1 inputs over real HTTP: expiresAt as a strict RFC 3339 date-time, and names with an encoded slash.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { startCredentialsProduct, type CredProduct } from './helpers/credentials-product.ts';
import { signInUser, type SignedIn } from './helpers/session.ts';

let p: CredProduct;
let alice: SignedIn;
const base = '/web/_account';

before(async () => {
  p = await startCredentialsProduct();
  alice = await signInUser(p, 'acme', 'alice');
});
after(() => p.close());

const put = (path: string, body: string) => p.call(`${base}${path}`, { method: 'PUT', rawBody: body, headers: { cookie: alice.cookie, 'content-type': 'application/json' } });

describe('expiresAt', () => {
  test('impossible dates and times are 400 invalid_request naming what is wrong, never rolled over', async () => {
    for (const [expiresAt, message] of [
      ['2099-02-30T00:00:00Z', /February 2099 has no day 30/],
      ['2099-02-29T00:00:00Z', /February 2099 has no day 29/],
      ['2099-04-31T10:00:00Z', /April 2099 has no day 31/],
      ['2099-00-10T10:00:00Z', /month 00/],
      ['2099-13-10T10:00:00Z', /month 13/],
      ['2099-01-00T10:00:00Z', /January 2099 has no day 00/],
      ['2099-01-01T24:00:00Z', /hour 24/],
      ['2099-01-01T10:60:00Z', /minute 60/],
      ['2099-01-01T10:00:61Z', /second 61/],
      ['2099-01-01T10:00:60Z', /leap second/],
      ['2099-01-01T10:00:00+24:00', /offset/],
      ['2099-01-01T10:00:00+01:60', /offset/],
      ['2099-01-01T10:00Z', /RFC 3339/],
      ['2099-01-01 10:00:00Z', /RFC 3339/],
      ['2099-01-01T10:00:00', /RFC 3339/],
      ['+2099-01-01T10:00:00Z', /RFC 3339/],
    ]) {
      const r = await put('/credentials/gh/date', JSON.stringify({ value: 'x', expiresAt }));
      assert.equal(r.status, 400, `${expiresAt} -> ${r.status} ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request', expiresAt as string);
      assert.match(r.json.error.message, message as RegExp, expiresAt as string);
    }
  });

  test('real dates pass: leap days, offsets, fractions, and a leap second as the instant after it', async () => {
    for (const [expiresAt, stored] of [
      ['2096-02-29T12:00:00Z', '2096-02-29T12:00:00.000Z'],
      ['2400-02-29T00:00:00Z', '2400-02-29T00:00:00.000Z'],
      ['2099-04-30T23:59:59.123456789+02:00', '2099-04-30T21:59:59.123Z'],
      ['2099-01-01t10:00:00z', '2099-01-01T10:00:00.000Z'],
      ['2098-12-31T23:59:60Z', '2099-01-01T00:00:00.000Z'],
      ['2098-12-31T18:59:60.5-05:00', '2099-01-01T00:00:00.500Z'],
    ]) {
      const r = await put('/credentials/gh/date', JSON.stringify({ value: 'x', expiresAt }));
      assert.ok(r.status === 201 || r.status === 200, `${expiresAt} -> ${r.status} ${r.text}`);
      assert.equal(r.json.expiresAt, stored, expiresAt);
    }
    const century = await put('/credentials/gh/date', JSON.stringify({ value: 'x', expiresAt: '2100-02-29T00:00:00Z' }));
    assert.equal(century.status, 400, '2100 is not a leap year');
  });

  test('past the year 9999 in UTC is 400: stored, it came back as `+010000-…`, which no RFC 3339 reader takes (attack round 10)', async () => {
    for (const expiresAt of ['9999-12-31T23:59:60Z', '9999-12-31T23:59:59-00:01', '9999-12-31T12:00:00-23:59']) {
      const r = await put('/credentials/gh/far', JSON.stringify({ value: 'x', expiresAt }));
      assert.equal(r.status, 400, `${expiresAt} -> ${r.status} ${r.text}`);
      assert.equal(r.json.error.code, 'invalid_request');
      assert.match(r.json.error.message, /9999-12-31T23:59:59Z/);
    }
    const last = await put('/credentials/gh/far', JSON.stringify({ value: 'x', expiresAt: '9999-12-31T23:59:59.999Z' }));
    assert.equal(last.status, 201, last.text);
    assert.equal(last.json.expiresAt, '9999-12-31T23:59:59.999Z');
    // What the server wrote, sent back as it is (a client's read-modify-write), is taken again.
    const again = await put('/credentials/gh/far', JSON.stringify({ value: 'y', expiresAt: last.json.expiresAt }));
    assert.equal(again.status, 200, again.text);
    const listed = await p.call(`${base}/credentials`, { headers: { cookie: alice.cookie } });
    assert.equal(listed.json.credentials.find((c: { name: string }) => c.name === 'far').expiresAt, '9999-12-31T23:59:59.999Z');
  });
});

describe('names with an encoded slash', () => {
  test('gh%2Ftoken is 400 invalid_name naming the bad plugin or name, for GET, PUT and DELETE', async () => {
    for (const [path, message] of [
      ['/credentials/gh%2Ftoken', /plugin "gh\/token" may not contain "\/"/],
      ['/credentials/gh%2ftoken', /plugin "gh\/token" may not contain "\/"/],
      ['/credentials/gh/to%2Fken', /name "to\/ken" may not contain "\/"/],
      ['/credentials/gh%2Ftoken/x', /plugin "gh\/token" may not contain "\/"/],
    ] as const) {
      for (const method of ['GET', 'PUT', 'DELETE']) {
        const r = await p.call(`${base}${path}`, { method, rawBody: method === 'PUT' ? '{"value":"x"}' : undefined, headers: { cookie: alice.cookie, 'content-type': 'application/json' } });
        assert.equal(r.status, 400, `${method} ${path} -> ${r.status} ${r.text}`);
        assert.equal(r.json.error.code, 'invalid_name', `${method} ${path}`);
        assert.match(r.json.error.message, message, `${method} ${path}`);
      }
    }
  });
});
