// The slow-upload watch (client-errors.ts) sweeps requests with a body every TIMEOUT_CHECK_MS. A body that a failed
// pipeline destroyed (a snapshot received onto a full disk) has `req.socket === null`; the sweep read `.destroyed` of
// it and threw out of its timer, stopping the process: a cluster follower died so, and every org with it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { request } from 'undici';
import { TIMEOUT_CHECK_MS } from '../src/shared/client-errors.ts';

// A server with the product's watch whose one route streams the body into a file that cannot be written.
const SERVER = `
import { createServer } from 'node:http';
import { createWriteStream } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import { limitSlowClients } from './src/shared/client-errors.ts';
const server = createServer((req, res) => {
  if (req.method === 'GET') return res.end('alive');
  pipeline(req, createWriteStream('/nonexistent-dir/upload')).catch(() => { res.writeHead(507); res.end('full'); });
});
limitSlowClients(server);
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

test('a request whose body a failed pipeline destroyed does not stop the process at the next sweep', async () => {
  const child = spawn(process.execPath, ['--input-type=module', '-e', SERVER], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  try {
    const port = Number(await new Promise<string>((resolve) => child.stdout.once('data', (d) => resolve(String(d).trim()))));
    // Headers and the first bytes of a large body: the server answers 507 and its pipeline destroys the request.
    const answer = await new Promise<string>((resolve) => {
      const s = connect(port, '127.0.0.1', () => s.write(`POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n${'a'.repeat(4096)}`));
      let got = '';
      s.on('data', (d) => (got += d));
      s.on('error', () => resolve(got));
      s.on('close', () => resolve(got));
      setTimeout(() => s.destroy(), 1000);
    });
    assert.match(answer, /^HTTP\/1\.1 507/, 'premise: the upload was refused');
    // Past two sweeps of the watch: the process must still answer.
    const over = await Promise.race([exited, new Promise<'alive'>((r) => setTimeout(() => r('alive'), 2 * TIMEOUT_CHECK_MS + 500))]);
    assert.equal(over, 'alive', `the process exited (${String(over)}): ${stderr.slice(0, 600)}`);
    const res = await request(`http://127.0.0.1:${port}/`);
    assert.equal(await res.body.text(), 'alive');
  } finally {
    child.kill('SIGKILL');
  }
});
