// `scopebase shell`: an interactive SQL prompt against a repo's database (like `turso db shell`): statements end
// at `;` and may span lines; reads go to /_db/query, writes to /_db/execute; history is kept between sessions.
import { appendFileSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Command } from 'commander';
import { ScopebaseError } from '../client/index.ts';
import { splitStatements } from '../db/statement-end.ts';
import { addTargetOptions, attempt, connect, type Target, type TargetOptions } from './target.ts';
import { CliError, count, EXIT, explain, printJson, table, visible } from './output.ts';
import { printRows, printWrite, resultJson, tableRows } from './database.ts';
import { describeIoError } from './files.ts';

const HISTORY_LINES = 500;
const HELP = `.tables            list the tables with their row counts
.schema [table]    show the CREATE statements
.status            the database's version, size and migrations
.help              this text
.quit, .exit       leave (or Ctrl-D)
SQL ends with ; and may span lines. Reads run on a snapshot; each write commits on its own.
`;

function historyFile(): string {
  return process.env.SCOPEBASE_HISTORY || join(homedir(), '.scopebase_history');
}

function loadHistory(): string[] {
  try {
    return readFileSync(historyFile(), 'utf8').split('\n').filter(Boolean).slice(-HISTORY_LINES).reverse();
  } catch {
    return [];
  }
}

/** Runs one statement: as a read, and as a write when the server says it writes. */
async function runStatement(t: Target, sql: string): Promise<void> {
  try {
    const r = await t.client.query(sql);
    if (t.json) printJson(resultJson(r));
    else printRows(r);
  } catch (e) {
    if (!(e instanceof ScopebaseError) || e.code !== 'read_only') throw e;
    const w = await t.client.execute(sql);
    if (t.json) printJson({ ...resultJson(w), version: w.version });
    else printWrite(w);
  }
}

async function dotCommand(t: Target, line: string): Promise<boolean> {
  const [cmd, arg] = line.trim().split(/\s+/);
  if (cmd === '.quit' || cmd === '.exit') return false;
  if (cmd === '.help') process.stdout.write(HELP);
  else if (cmd === '.tables') {
    const s = await t.client.status();
    process.stdout.write(s.tables && s.tables.length ? table(['table', 'rows'], tableRows(s.tables)) : '(no tables)\n');
  } else if (cmd === '.schema') {
    // A virtual table's shadow tables are its storage, not the user's (as .tables and status leave them out).
    const r = await t.client.query("SELECT sql FROM sqlite_schema WHERE sql IS NOT NULL AND (?1 IS NULL OR tbl_name = ?1) AND tbl_name NOT IN (SELECT name FROM pragma_table_list WHERE type = 'shadow') ORDER BY tbl_name, type DESC, name", [arg ?? null]);
    process.stdout.write(r.values.map((v) => `${visible(String(v[0]))};\n`).join('') || '(nothing)\n');
  } else if (cmd === '.status') {
    const s = await t.client.status();
    process.stdout.write(`database ${s.database}: ${s.exists ? `version ${s.version}, ${s.sizeBytes} bytes, ${count(s.migrations?.applied ?? 0, 'migration')}` : 'does not exist yet'}\n`);
  } else process.stdout.write(`unknown command ${cmd}: try .help\n`);
  return true;
}

export function addShellCommand(program: Command): void {
  addTargetOptions(program.command('shell')
    .description("an interactive SQL prompt against a repo's database, with history (.help lists the dot commands)")
    .argument('[org/repo]', 'the repo (or --repo / --org)')
    .addHelpText('after', `\nIn the shell:\n${HELP.replace(/^/gm, '  ').trimEnd()}\nHistory is kept in ~/.scopebase_history (SCOPEBASE_HISTORY); piped input runs as a script.\n\nExample:\n  scopebase shell acme/web`))
    .action(async (repo: string | undefined, opts: TargetOptions) => {
      const t = connect(opts, repo);
      const first = await attempt(t, () => t.client.status()); // fail now, with the usual one line, if it cannot connect
      const interactive = process.stdin.isTTY === true;
      const name = `${t.org}/${t.repo}${t.database === 'main' ? '' : `/${t.database}`}`;
      if (interactive) process.stdout.write(`connected to ${name} at ${t.url} (${first.exists ? `version ${first.version}` : 'new database'}); .help for help, .quit to leave\n`);
      const rl = createInterface({ input: process.stdin, output: process.stdout, terminal: interactive, history: interactive ? loadHistory() : [], historySize: HISTORY_LINES, prompt: `${name}> ` });
      const prompt = () => {
        if (interactive) rl.prompt();
      };
      let buffer = '';
      let quit = false;
      let failures = 0;
      let keepHistory = true;
      const report = (e: unknown) => {
        if (!(e instanceof ScopebaseError)) throw e;
        failures++;
        process.stderr.write(`${visible(explain(e, t).message)}\n`);
      };
      // Ctrl-C drops what is typed so far; on an empty prompt it leaves.
      rl.on('SIGINT', () => {
        if (buffer === '' && rl.line === '') return rl.close();
        buffer = '';
        rl.write(null, { ctrl: true, name: 'e' });
        rl.write(null, { ctrl: true, name: 'u' });
        process.stdout.write('\n');
        rl.setPrompt(`${name}> `);
        prompt();
      });
      prompt();
      for await (const line of rl) {
        if (interactive && line.trim() && keepHistory) {
          try {
            appendFileSync(historyFile(), line.replace(/\n/g, ' ') + '\n', { mode: 0o600 });
          } catch (e) {
            keepHistory = false; // the session goes on without history, said once
            process.stderr.write(`history not kept: ${describeIoError(e, historyFile())}\n`);
          }
        }
        try {
          if (buffer === '' && line.trim().startsWith('.')) {
            quit = !(await dotCommand(t, line));
            if (quit) break;
          } else {
            const { statements, rest } = splitStatements(buffer + line + '\n');
            buffer = rest === '' ? '' : buffer + line + '\n';
            if (statements.length > 0) buffer = rest === '' ? '' : rest + '\n';
            for (const sql of statements) await runStatement(t, sql);
          }
        } catch (e) {
          report(e);
        }
        rl.setPrompt(buffer === '' ? `${name}> ` : `${' '.repeat(Math.max(name.length - 3, 0))}...> `);
        prompt();
      }
      rl.close();
      // Piped input may end without a last `;`: run what is left, as sqlite3 would not silently drop it.
      if (!quit && buffer.trim() !== '') await runStatement(t, buffer.trim()).catch(report);
      // A script piped in fails as a whole when a statement failed, so `scopebase shell < file.sql` can be checked.
      if (!interactive && failures > 0) throw new CliError(EXIT.refused, `${failures} statement(s) failed (above)`);
    });
}
