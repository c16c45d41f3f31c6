// The `scopebase` command: one entry, one file per command.
import { flushCompileCache } from 'node:module';
import { ConfigError } from '../shared/config.ts';

const commands: Record<string, { summary: string; run: (args: string[]) => Promise<number | void> }> = {
  start: { summary: 'run every part in one process (the default of npm start)', run: async () => (await import('./start.ts')).startCommand(['all']) },
  serve: { summary: 'serve proxy|db|account|mirror: run one part as its own process', run: async (a) => (await import('./start.ts')).startCommand(a) },
  secret: { summary: 'secret org/repo: print the repo\'s shared secret (SPEC 4.1)', run: async (a) => (await import('./secret.ts')).secretCommand(a) },
  migrate: { summary: 'migrate <dir> --url URL --repo org/repo [--database D] [--dry-run]: apply NNNN_name.sql files', run: async (a) => (await import('./migrate.ts')).migrateCommand(a) },
  'rotate-keys': { summary: 're-seal every stored credential under the current ACCOUNT_ENCRYPTION_KEYS key', run: async (a) => (await import('./rotate-keys.ts')).rotateKeysCommand(a) },
};

function usage(): string {
  const lines = Object.entries(commands).map(([name, c]) => `  ${name.padEnd(12)} ${c.summary}`);
  return `usage: scopebase <command> [args]\n\n${lines.join('\n')}\n`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...args] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    process.stdout.write(usage());
    return name === undefined ? 2 : 0;
  }
  const command = commands[name];
  if (!command) {
    process.stderr.write(`scopebase: unknown command ${JSON.stringify(name)}\n\n${usage()}`);
    return 2;
  }
  try {
    const code = await command.run(args);
    flushCompileCache(); // a started server has loaded its code now; it may end by SIGKILL and never reach the exit-time write
    return typeof code === 'number' ? code : 0;
  } catch (e) {
    if (e instanceof ConfigError) {
      process.stderr.write(`scopebase: configuration error: ${e.message}\n`);
      return 78;
    }
    throw e;
  }
}

main(process.argv.slice(2)).then((code) => {
  // A failure ends the process even if a part started before it left handles open; a started server keeps running.
  if (code !== 0) process.exit(code);
}, (e) => {
  process.stderr.write(`scopebase: ${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
