#!/usr/bin/env node
// The package's bin: in a checkout it runs the TypeScript CLI with Node's type stripping (Node 24, pinned in
// devDependencies); installed (under node_modules, where Node strips no types) the JavaScript `npm pack` built.
// Plain JavaScript, so the compile cache is on before the first .ts file: a warm cache skips loading the stripper.
// It says in one line, not a stack trace, why it cannot run: an older Node, or an installed copy without dist/.
import * as nodeModule from 'node:module';
import { fileURLToPath } from 'node:url';
import { compileCacheDir } from '../src/shared/compile-cache.js';

const major = Number(process.versions.node.split('.')[0]);
if (major < 24) {
  console.error(`scopebase: needs Node.js 24 (this is ${process.version}); in the scopebase checkout \`npm ci\` brings it, and \`npx scopebase\` there uses it`);
  process.exit(78);
}
if (fileURLToPath(import.meta.url).includes('/node_modules/')) {
  // Node strips types only outside node_modules: an installed package runs the JavaScript `npm pack` built into dist/.
  let main;
  try {
    main = await import('../dist/cli/main.js');
  } catch (e) {
    if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !String(e.message).includes('dist/cli/main.js')) throw e;
    console.error('scopebase: this copy has no built command (dist/): install a package made by `npm pack` in a scopebase checkout, or run `npx scopebase` in the checkout');
    process.exit(78);
  }
  await main.run(process.argv.slice(2));
} else {
  const cacheDir = compileCacheDir();
  if (cacheDir) nodeModule.enableCompileCache(cacheDir);
  const { run } = await import('../src/cli/main.ts');
  await run(process.argv.slice(2));
}
