// docs/deploy.md's files, checked as far as this machine can: the systemd unit by systemd's own verifier, and the
// container file's steps run for real in a copy of the project (no Docker engine here): its dependency install
// (`npm ci --omit=dev`) and its command, which must start the product with the production dependency set alone.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { tempDir } from './helpers/product.ts';

const ROOT = resolve(import.meta.dirname, '..');

test('deploy/scopebase.service passes systemd-analyze verify without a warning', (t) => {
  if (spawnSync('systemd-analyze', ['--version']).status !== 0) return t.skip('systemd-analyze is not installed');
  const r = spawnSync('systemd-analyze', ['verify', join(ROOT, 'deploy/scopebase.service')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr.trim(), '', 'no warning');
});

test('deploy/Containerfile: its install step and its command, run in a copy of what it copies, start the product', async () => {
  const file = readFileSync(join(ROOT, 'deploy/Containerfile'), 'utf8');
  const copied = [...file.matchAll(/^COPY (.+) \S+$/gm)].flatMap((m) => m[1]!.split(/\s+/));
  assert.deepEqual(copied, ['package.json', 'package-lock.json', 'bin', 'src']);
  const major = /^FROM node:(\d+)/m.exec(file)?.[1];
  assert.equal(major, /\d+/.exec(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).engines.node)![0], 'the image has the Node the package needs');
  const install = /^RUN (npm ci .*)$/m.exec(file)![1]!;
  const cmd = JSON.parse(/^CMD (\[.*\])$/m.exec(file)![1]!) as string[];

  const app = tempDir('scopebase-container-');
  try {
    for (const f of copied) cpSync(join(ROOT, f), join(app, f), { recursive: true });
    // From npm's cache (CI's `npm ci` filled it): the install step must need nothing the lockfile lacks.
    const [npm, ...npmArgs] = install.split(/\s+/);
    await new Promise<void>((done, fail) => execFile(npm!, [...npmArgs, '--offline'], { cwd: app, env: { ...process.env, NODE_ENV: 'production' } }, (err, _o, stderr) => (err ? fail(new Error(stderr)) : done())));
    assert.ok(existsSync(join(app, 'node_modules/fastify')), 'runtime dependencies installed');
    assert.ok(!existsSync(join(app, 'node_modules/typescript')), 'devDependencies left out');
    // The image's command, on this machine's Node 24; development mode, since a production start needs real keys
    // and an identity provider (docs/deploy.md). What is checked is that nothing the product loads is missing.
    const child = spawn(process.execPath, cmd.slice(1), { cwd: app, env: { ...process.env, NODE_ENV: 'development', DATA_DIR: join(app, 'data'), PORT: '0', ADMIN_PORT: '0', LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const closed = new Promise((r) => child.on('close', r));
    for (let i = 0; i < 300 && !/is running: http/.test(out) && child.exitCode === null; i++) await new Promise((r) => setTimeout(r, 100));
    const admin = /\(admin (http:\/\/\S+)\)/.exec(out)?.[1];
    assert.ok(admin, `it started: ${out.slice(-1500)}`);
    assert.equal((await fetch(`${admin}/healthz`)).status, 200, 'the HEALTHCHECK URL answers');
    child.kill('SIGTERM');
    await closed;
  } finally {
    rmSync(app, { recursive: true, force: true });
  }
});
