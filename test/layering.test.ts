// Dependencies point one way: cli → proxy → services (db, account, mirror) → shared; mirror (and cluster) → db,
// never back. What several parts share lives in shared/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = resolve('src');
/** Which packages each package may import (besides itself). */
const ALLOWED: Record<string, string[]> = {
  shared: [],
  db: ['shared'],
  mirror: ['db', 'shared'],
  cluster: ['db', 'shared'],
  account: ['shared'],
  client: [],
  proxy: ['db', 'account', 'mirror', 'shared'],
  cli: ['proxy', 'db', 'account', 'mirror', 'cluster', 'client', 'shared'],
};

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
}

test('no import runs against the direction of the layers', () => {
  const wrong: string[] = [];
  for (const file of files(ROOT)) {
    const from = relative(ROOT, file).split('/')[0]!;
    for (const m of readFileSync(file, 'utf8').matchAll(/^(?:import|export)\s[^'"]*?from\s+'(\.[^']+)'/gm)) {
      const to = relative(ROOT, resolve(dirname(file), m[1]!)).split('/')[0]!;
      if (to !== from && !(ALLOWED[from] ?? []).includes(to)) wrong.push(`${relative(ROOT, file)} imports ${m[1]}`);
    }
  }
  assert.deepEqual(wrong, []);
});
