// A start that fails part-way (the reference mirror's MIRROR_PORT taken) must leave nothing running: its executors
// were left alive, so the process that tried never exited (a test file hung until CI's limit).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { startProduct } from './helpers/product.ts';
import { executorPids } from './helpers/processes.ts';
import { newSecret } from './helpers/mirror.ts';

test('a product whose MIRROR_PORT is taken fails to start with EADDRINUSE and leaves no executor running', async () => {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', () => resolve()));
  try {
    const port = (taken.address() as { port: number }).port;
    const before = executorPids().length;
    await assert.rejects(startProduct({ MIRROR_PORT: String(port), MIRROR_SECRET: newSecret() }), /EADDRINUSE/);
    // Killed processes go within a moment; those still running after 5 s were left behind.
    const deadline = Date.now() + 5000;
    while (executorPids().length > before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.equal(executorPids().length, before, 'executors left running by the failed start');
  } finally {
    taken.close();
  }
});
