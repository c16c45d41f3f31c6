// The `scopebase` command (SPEC 10), on commander: the most used Node argument parser, no dependencies of its own,
// and `<command> --help` and `help <command>` come from one description per command, so they cannot drift apart.
import { productVersion } from '../shared/version.ts';
import { flushCompileCache } from 'node:module';
import { Argument, Command, CommanderError } from 'commander';
import { ConfigError } from '../shared/config.ts';
import { CliError, EXIT, printJson, shellWord, visible } from './output.ts';
import { addSecretCommand } from './secret.ts';
import { addDatabaseCommands } from './database.ts';
import { addMigrateCommand } from './migrate.ts';
import { addShellCommand } from './shell.ts';
import { addRotateKeysCommand } from './rotate-keys.ts';
import { addHistoryCommands } from './history.ts';
import { addTransferCommands } from './transfer.ts';
import { addBackupCommands } from './backup.ts';
import { addClusterCommands } from './cluster.ts';

const FOOTER = `
Exit codes: 0 success, 1 the server said no, 2 usage error, 3 cannot reach the server, 78 configuration error.
Commands that talk to a running instance read SCOPEBASE_URL, SCOPEBASE_REPO, SCOPEBASE_DATABASE and
SCOPEBASE_SECRET when their option is not given, and PORT, BASE_DOMAIN, RUNTIME_ROOT_KEY and DATA_DIR as the
server does. Reference: docs/cli.md.`;

async function start(part: 'all' | 'proxy' | 'db' | 'account' | 'mirror'): Promise<void> {
  const { startCommand } = await import('./start.ts'); // the server's code loads only when a server starts
  await startCommand(part);
  flushCompileCache(); // a started server has loaded its code now; it may end by SIGKILL and never reach the exit-time write
}

export function buildProgram(): Command {
  const program = new Command('scopebase')
    .description('a database and sign-in for every repository: run the server, and work with a repo\'s database')
    .version(productVersion(), '-v, --version')
    .exitOverride()
    .configureOutput({ outputError: () => undefined }) // main() prints commander's errors as its own one line; inherited by every command
    .addHelpText('after', FOOTER);
  // Server
  program.command('start')
    .description('run every part in one process (what `npm start` runs); the banner prints the URL and a curl line')
    .action(() => start('all'));
  program.command('serve')
    .description('run one part as its own process: proxy, db, account or mirror (the proxy finds the others with DB_SERVICE_URL and ACCOUNT_SERVICE_URL)')
    .addArgument(new Argument('<part>', 'the part to run').choices(['proxy', 'db', 'account', 'mirror']))
    .action((part: 'proxy' | 'db' | 'account' | 'mirror') => start(part));
  addSecretCommand(program);
  addRotateKeysCommand(program);
  // A repo's database
  addDatabaseCommands(program);
  addShellCommand(program);
  addMigrateCommand(program);
  addHistoryCommands(program);
  addTransferCommands(program);
  addBackupCommands(program);
  addClusterCommands(program);
  return program;
}

/** `scopebase query --help`: the help of the command the arguments name, for a usage error's line. */
function helpFor(program: Command, argv: string[]): string {
  const names = ['scopebase'];
  let cmd = program;
  for (const arg of argv) {
    const sub = cmd.commands.find((c) => c.name() === arg);
    if (!sub) break;
    names.push(arg);
    cmd = sub;
  }
  return `${names.join(' ')} --help`;
}

/**
 * `help cluster move` as `cluster move --help` (commander's help command takes one word, and printed cluster's); an
 * unknown word as `cluster nosuch`, which says so; words past a command without subcommands, and options, are ignored.
 */
function nestedHelp(program: Command, words: string[]): string[] {
  let cmd = program;
  for (const [i, word] of words.entries()) {
    if (!cmd.commands.length || word.startsWith('-')) return [...words.slice(0, i), '--help'];
    const sub = cmd.commands.find((c) => c.name() === word);
    if (!sub) return words.slice(0, i + 1);
    cmd = sub;
  }
  return [...words, '--help'];
}

/** Any failure as one CliError. */
function failure(e: unknown, program: Command, argv: string[]): CliError {
  // `restore` (a whole backup into DATA_DIR) taken for time travel: commander would ask "Did you mean --version?".
  if (e instanceof CommanderError && e.code === 'commander.unknownOption' && argv[0] === 'restore' && /'--to-(time|version)'/.test(e.message)) {
    return new CliError(EXIT.usage, `restore fills DATA_DIR from a whole-instance backup; to bring a database back to a version or a time, use restore-db: scopebase restore-db ${argv.slice(1).map(shellWord).join(' ')}`);
  }
  if (e instanceof CommanderError) {
    // One line: commander's "error: " prefix and its "\n(Did you mean …?)" folded in, and where to read the usage.
    return new CliError(EXIT.usage, `${e.message.replace(/^error: /, '').replace(/\s*\n\s*/g, ' ')} (${helpFor(program, argv)} for usage)`);
  }
  if (e instanceof CliError) return e;
  if (e instanceof ConfigError) return new CliError(EXIT.config, `configuration error: ${e.message}`);
  // A bug, not an ordinary failure: say so in one line; the stack only when asked for.
  const message = `${(e as Error).message ?? e}`;
  return new CliError(EXIT.refused, `unexpected error: ${message} (run with SCOPEBASE_DEBUG=1 for details)`, { error: { code: 'internal', message } });
}

/** Runs the CLI; resolves to the exit code. Every ordinary failure is one line on stderr, and with --json also SPEC 3's error on stdout. */
export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  if (argv.length === 0) {
    program.outputHelp({ error: true });
    return EXIT.usage;
  }
  // `help <typo>`: commander would print the whole help and not say why; answer as `scopebase <typo>` does.
  if (argv[0] === 'help' && argv[1] !== undefined && !argv[1].startsWith('-') && !program.commands.some((c) => c.name() === argv[1])) argv = argv.slice(1, 2);
  else if (argv[0] === 'help' && argv.length > 2) argv = nestedHelp(program, argv.slice(1));
  try {
    await program.parseAsync(argv, { from: 'user' });
    return EXIT.ok;
  } catch (e) {
    // Help or the version as asked (exit 0), or a command group's help for want of its command (`cluster`).
    if (e instanceof CommanderError && (e.exitCode === 0 || e.code === 'commander.help')) return e.exitCode === 0 ? EXIT.ok : EXIT.usage;
    const f = failure(e, program, argv);
    process.stderr.write(`scopebase: ${visible(f.message)}\n`); // it may quote a tenant's names
    if (process.env.SCOPEBASE_DEBUG) process.stderr.write(`${(e as Error).stack}\n`);
    const options = argv.includes('--') ? argv.slice(0, argv.indexOf('--')) : argv; // after --, "--json" is an argument
    if (options.includes('--json') && !f.jsonPrinted) printJson(f.json());
    return f.exitCode;
  }
}

/** The process's entry: a failure ends the process even if a part started before it left handles open; a started server keeps running. */
export async function run(argv: string[]): Promise<void> {
  // Output piped into a reader that stopped (`| head`): nothing is left to tell, and no stack trace should say so.
  // Not for a server (start, serve): an exit 0 there would read as a clean stop to a supervisor, and no restart.
  const server = argv[0] === 'start' || argv[0] === 'serve';
  for (const stream of server ? [] : [process.stdout, process.stderr]) {
    stream.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'EPIPE') process.exit(0);
      throw e;
    });
  }
  const code = await main(argv);
  if (code !== 0) process.exit(code);
}

if (import.meta.main) await run(process.argv.slice(2));
