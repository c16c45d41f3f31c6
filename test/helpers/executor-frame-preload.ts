// Preloaded into executor processes (SCOPEBASE_EXECUTOR_NODE_ARGS): on SIGUSR2 the child writes a frame the service
// cannot read into its pipe (fd 3), a length under the 8-byte minimum, as a bug in the child's own code would.
import { writeSync } from 'node:fs';

process.on('SIGUSR2', () => {
  const frame = Buffer.alloc(8);
  frame.writeUInt32LE(4, 0);
  writeSync(3, frame);
});
