// The client as a user installs it: `npm pack`, `npm install` of the tarball into a fresh app (offline, from npm's
// cache, as `npm ci` of this repo filled it), then `import { createClient } from 'scopebase/client'` from a plain
// .mjs file against the real product, and from TypeScript with the shipped .d.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { ROOT_KEY, startProduct, tempDir } from './helpers/product.ts';

const run = promisify(execFile);
const ROOT = resolve(import.meta.dirname, '..');

/** npm pack into `dir`; the tarball's file name. */
async function pack(dir: string): Promise<string> {
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT, maxBuffer: 16 << 20 });
  return (JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string }[])[0]!.filename;
}

/** An app depending on the tarball, locked to this repo's own versions so `npm ci --offline` installs from the cache. */
function writeApp(app: string, tarball: string): void {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const spec = `file:../${tarball}`;
  const packages: Record<string, unknown> = {
    '': { name: 'app', dependencies: { scopebase: spec } },
    'node_modules/scopebase': { version: pkg.version, resolved: spec, dependencies: pkg.dependencies, engines: pkg.engines, bin: pkg.bin },
  };
  for (const [path, entry] of Object.entries(lock.packages)) if (path !== '' && !entry.dev) packages[path] = entry;
  mkdirSync(app, { recursive: true });
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module', dependencies: { scopebase: spec } }));
  writeFileSync(join(app, 'package-lock.json'), JSON.stringify({ name: 'app', lockfileVersion: 3, requires: true, packages }));
}

const APP_MJS = `
import { createClient, SqlError, UnauthorizedError, ScopebaseError } from 'scopebase/client';
const [port, secret] = process.argv.slice(2);
// The address form: url + org + repo (the client sends the org host itself).
const db = createClient({ url: 'http://127.0.0.1:' + port, org: 'acme', repo: 'web', secret });
await db.migrate([{ id: '0001_notes', sql: 'CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT, big INTEGER, data BLOB)' }]);
const w = await db.execute('INSERT INTO notes(body, big, data) VALUES (?, ?, ?) RETURNING id', ['hello', 9007199254740993n, new Uint8Array([0, 1, 255])]);
// The org-host form: acme.localhost resolves to loopback inside the client (RFC 6761).
const local = createClient({ url: 'http://acme.localhost:' + port + '/web', secret });
const r = await local.query('SELECT body, big, data FROM notes WHERE id = ?', [w.rows[0].id]);
const row = r.rows[0];
let sqlError = null, authError = null;
try { await db.query('SELECT * FROM missing'); } catch (e) { sqlError = e instanceof SqlError && e instanceof ScopebaseError ? e.code : String(e); }
try { await createClient({ url: 'http://acme.localhost:' + port + '/web', secret: 'wrong' }).status(); } catch (e) { authError = e instanceof UnauthorizedError ? e.status : String(e); }
console.log(JSON.stringify({
  body: row.body, big: typeof row.big + ':' + row.big, data: row.data instanceof Uint8Array ? [...row.data] : null,
  version: (await db.status()).version, sqlError, authError,
}));
`;

const APP_TS = `
import { createClient, SqlError, type Client } from 'scopebase/client';
const db: Client = createClient({ url: 'http://127.0.0.1:8080', org: 'acme', repo: 'web', secret: 's' });
export async function titles(): Promise<string[]> {
  const r = await db.query<{ id: number; title: string }>('SELECT id, title FROM todos WHERE id > ?', [0n]);
  // @ts-expect-error rows are typed: title is a string
  const wrong: number = r.rows[0]!.title;
  void wrong;
  const e: unknown = null;
  if (e instanceof SqlError) console.log(e.code, e.details);
  return r.rows.map((row) => row.title);
}
`;

test('npm pack, install the tarball into a fresh app, and use scopebase/client from plain JavaScript and TypeScript', async () => {
  const dir = tempDir('scopebase-pack-');
  const p = await startProduct();
  try {
    const tarball = await pack(dir);
    const app = join(dir, 'app');
    writeApp(app, tarball);
    try {
      await run('npm', ['ci', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: app });
    } catch (e) {
      assert.fail(`npm ci --offline of the packed package failed (run \`npm ci\` in the repo first so npm's cache holds its dependencies): ${(e as { stderr?: string }).stderr}`);
    }
    const installed = JSON.parse(readFileSync(join(app, 'node_modules/scopebase/package.json'), 'utf8'));
    assert.ok(installed.exports['./client'], 'the installed package exports ./client');

    writeFileSync(join(app, 'app.mjs'), APP_MJS);
    const { stdout } = await run(process.execPath, ['app.mjs', new URL(p.url).port, p.secret('acme', 'web')], { cwd: app });
    assert.deepEqual(JSON.parse(stdout), { body: 'hello', big: 'bigint:9007199254740993', data: [0, 1, 255], version: 2, sqlError: 'sql_error', authError: 401 });

    // `node --import scopebase/localhost`: any client in the process (here Node's own fetch) reaches acme.localhost.
    writeFileSync(join(app, 'probe.mjs'), 'const r = await fetch(process.argv[2]); console.log(r.status, (await r.text()).length > 0);');
    const probe = await run(process.execPath, ['--import', 'scopebase/localhost', 'probe.mjs', `http://acme.localhost:${new URL(p.url).port}/web/_db/v2`], { cwd: app });
    assert.equal(probe.stdout.trim(), '200 true');

    // The installed package's own command runs the JavaScript `npm pack` built (Node strips no types in node_modules).
    const bin = join(app, 'node_modules/.bin/scopebase');
    const env = { ...process.env, RUNTIME_ROOT_KEY: ROOT_KEY, DATA_DIR: join(dir, 'data') };
    assert.equal((await run(bin, ['secret', 'acme/web'], { cwd: app, env })).stdout.trim(), p.secret('acme', 'web'));
    const rows = await run(bin, ['query', 'acme/web', 'SELECT body FROM notes', '--url', p.url, '--json'], { cwd: app, env });
    assert.match(JSON.stringify(JSON.parse(rows.stdout)), /"hello"/, `and talks to the server: ${rows.stdout}`);
    // The server itself starts from the installed package: its executors are the built child.js.
    const server = spawn(bin, ['start'], { cwd: app, env: { ...env, PORT: '0', ADMIN_PORT: '0', LOG_LEVEL: 'warn' }, stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        server.stderr.on('data', (d) => { // the banner; logs go to stdout
          out += d;
          const m = /\n {2}address: (http:\/\/\S+)/.exec(out);
          if (m) resolve(m[1]!);
        });
        server.on('exit', (code) => reject(new Error(`exited ${code}`)));
      });
      const made = await run(bin, ['execute', 'acme/web', 'CREATE TABLE t(x)', '--url', url, '--json'], { cwd: app, env });
      assert.match(made.stdout, /"version":\s*1\b/, made.stdout);
    } finally {
      server.kill('SIGTERM');
      await once(server, 'exit');
    }

    writeFileSync(join(app, 'app.ts'), APP_TS);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({ compilerOptions: { target: 'es2022', module: 'nodenext', moduleResolution: 'nodenext', strict: true, noEmit: true, lib: ['es2022', 'dom'], types: [] }, files: ['app.ts'] }));
    const tsc = join(ROOT, 'node_modules/typescript/bin/tsc');
    const checked = await run(process.execPath, [tsc, '-p', app], { cwd: app }).then(() => '', (e: { stdout?: string }) => e.stdout ?? String(e));
    assert.equal(checked, '', 'the shipped .d.ts type-check a TypeScript app without @types/node');
  } finally {
    await p.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
