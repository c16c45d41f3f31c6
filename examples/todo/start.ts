// One command for the example: starts scopebase (as `npm start` does) with APPS routing acme/todo to this app,
// then the app itself. Run from the repository root: `npm run example:todo`.
import { execFileSync, spawn } from 'node:child_process';
import { createTodoApp } from './app.ts';

const port = Number(process.env.PORT ?? 8080);
const appPort = Number(process.env.TODO_PORT ?? 3000);
const baseDomain = process.env.BASE_DOMAIN ?? 'localhost';
const apps = { 'acme/todo': { url: `http://127.0.0.1:${appPort}`, requireSession: true } };

const scopebase = spawn(process.execPath, ['src/cli/main.ts', 'start'], { env: { ...process.env, APPS: JSON.stringify(apps) }, stdio: ['ignore', 'inherit', 'pipe'] });
const stop = () => scopebase.kill('SIGTERM');
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
scopebase.on('exit', (code) => process.exit(process.exitCode ?? code ?? 0));

// The banner (stderr) says when scopebase is up; pass it through meanwhile.
await new Promise<void>((resolve) => {
  let seen = '';
  scopebase.stderr!.on('data', (chunk: Buffer) => {
    process.stderr.write(chunk);
    seen += chunk;
    if (seen.includes('is running:')) resolve();
  });
});
const secret = execFileSync(process.execPath, ['src/cli/main.ts', 'secret', 'acme/todo'], { encoding: 'utf8' }).trim();
const app = await createTodoApp({ serverUrl: `http://127.0.0.1:${port}`, org: 'acme', repo: 'todo', baseDomain, secret });
app.on('error', (e: NodeJS.ErrnoException) => {
  // One line, and scopebase stops too (its exit ends this process): no stack trace, no server left behind.
  const why = e.code === 'EADDRINUSE' ? `port ${appPort} is already in use; set TODO_PORT to a free port (TODO_PORT=3001 npm run example:todo)` : e.message;
  process.stderr.write(`todo example: ${why}\n`);
  process.exitCode = 78;
  stop();
});
app.listen(appPort, '127.0.0.1', () => {
  process.stderr.write(`\ntodo example: open http://acme.${baseDomain}:${port}/todo/ and sign in with any email\n`);
});
