// Runs the `scopebase` command as a subprocess (asynchronously: a product under test in this process keeps answering).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';

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
