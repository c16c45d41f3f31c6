#!/usr/bin/env node
// The package's bin: runs the TypeScript CLI with Node's type stripping (Node 24, pinned in devDependencies).
// Plain JavaScript, so the compile cache is on before the first .ts file: a warm cache skips loading the stripper.
import { enableCompileCache } from 'node:module';
import { compileCacheDir } from '../src/shared/compile-cache.js';

const cacheDir = compileCacheDir();
if (cacheDir) enableCompileCache(cacheDir);
const { run } = await import('../src/cli/main.ts');
await run(process.argv.slice(2));
