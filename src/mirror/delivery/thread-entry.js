// The delivery thread's entry, in plain JavaScript: it turns Node's compile cache on for this thread before the first
// .ts file, so with a warm cache the thread runs our TypeScript without loading its own type stripper (~17 MB).
import { enableCompileCache, flushCompileCache } from 'node:module';
import { compileCacheDir } from '../../shared/compile-cache.js';

const dir = process.env.NODE_COMPILE_CACHE || compileCacheDir();
if (dir) enableCompileCache(dir);
await import('./thread.ts');
if (dir) flushCompileCache(); // the product often ends by SIGKILL, before an exit-time write
