// docs/api.md is rendered from the OpenAPI document the product serves (scripts/api-reference.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { renderApiReference } from '../scripts/api-reference.ts';

test('docs/api.md is the current rendering of the OpenAPI document', () => {
  assert.equal(readFileSync('docs/api.md', 'utf8'), renderApiReference(), 'docs/api.md is stale: run `npm run docs:api`');
});
