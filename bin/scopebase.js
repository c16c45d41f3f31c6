#!/usr/bin/env node
// The package's bin: runs the TypeScript CLI with Node's type stripping (Node 24, pinned in devDependencies).
// Plain JavaScript, so the compile cache is on before the first .ts file: a warm cache skips loading the stripper.
// It says in one line, not a stack trace, why it cannot run: an older Node, or a copy inside node_modules.
import * as nodeModule from 'node:module';
import { fileURLToPath } from 'node:url';
import { compileCacheDir } from '../src/shared/compile-cache.js';

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(`scopebase: needs Node.js 24 (this is ${process.version}); in the scopebase checkout \`npm ci\` brings it, and \`npx scopebase\` there uses it`);
  process.exit(78);
}
if (fileURLToPath(import.meta.url).includes('/node_modules/')) {
  // Node strips types only outside node_modules: an app that installed the package has its client, not its command.
  console.error('scopebase: the command runs in a scopebase checkout, not from an app\'s node_modules (the package gives apps scopebase/client and scopebase/localhost); e.g. SCOPEBASE_SECRET=$(cd <checkout> && npx scopebase secret acme/web)');
  process.exit(78);
}
const cacheDir = compileCacheDir();
if (cacheDir) nodeModule.enableCompileCache(cacheDir);
const { run } = await import('../src/cli/main.ts');
await run(process.argv.slice(2));
