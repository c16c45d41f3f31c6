#!/usr/bin/env node
// The package's bin: runs the TypeScript CLI with Node's type stripping (Node 24, pinned in devDependencies).
import '../src/cli/main.ts';
