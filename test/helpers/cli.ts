// Runs the `scopebase` command as a subprocess (asynchronously: a product under test in this process keeps answering).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { ROOT_KEY, startProduct, tempDir, type Product } from './product.ts';

export interface Run { code: number; stdout: string; stderr: string }

/** `scopebase <args>` with exactly this environment; `input` on its standard input. */
export function runCli(args: string[], env: Record<string, string | undefined>, input?: string): Promise<Run> {
  const child = spawn(process.execPath, ['src/cli/main.ts', ...args], { env, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(input ?? '');
  return new Promise((resolve) => child.on('close', (code) => resolve({ code: code ?? -1, stdout, stderr })));
}

/**
 * The CLI against a product under test on `port()` with a clean SCOPEBASE_* environment: its history file under
 * `work`, no DATA_DIR of its own; `env` added last.
 */
export type Cli = (args: string[], env?: Record<string, string | undefined>, input?: string) => Promise<Run>;

export function cliAgainst(work: string, port: () => string, rootKey: string): Cli {
  return (args, env = {}, input) => {
    const base: Record<string, string | undefined> = { ...process.env, RUNTIME_ROOT_KEY: rootKey, PORT: port(), BASE_DOMAIN: 'localhost', DATA_DIR: join(work, 'no-data') };
    for (const k of Object.keys(base)) if (k.startsWith('SCOPEBASE_')) delete base[k];
    return runCli(args, { ...base, SCOPEBASE_HISTORY: join(work, 'history'), ...env }, input);
  };
}

/**
 * A product on loopback for the whole test file and the CLI against it: started before the first test (`started`
 * gets it, and may put data in), closed and its `work` folder removed after the last.
 */
export function cliForFile(prefix: string, started: (p: Product, cli: Cli, work: string) => void | Promise<void>): { cli: Cli; work: string; port: () => string } {
  const work = tempDir(prefix);
  let p: Product | undefined;
  const port = () => new URL(p!.url).port;
  const cli = cliAgainst(work, port, ROOT_KEY);
  before(async () => {
    p = await startProduct();
    await started(p, cli, work);
  });
  after(async () => {
    await p?.close();
    rmSync(work, { recursive: true, force: true });
  });
  return { cli, work, port };
}

/** An ordinary failure: exactly one line on stderr (matched without its newline), no stack trace. */
export function oneLine(r: Run, pattern: RegExp): void {
  assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
  assert.match(r.stderr.trimEnd(), pattern);
  assert.doesNotMatch(r.stderr, /\n\s+at |\.ts:\d+/);
}

/** A failure the operation met (exit 1), in one line. */
export function failedInOneLine(r: Run, pattern: RegExp): void {
  assert.equal(r.code, 1, r.stderr);
  oneLine(r, pattern);
}
