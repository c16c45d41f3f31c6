// `scopebase rotate-keys`: re-seals every stored credential under the current (first) ACCOUNT_ENCRYPTION_KEYS key.
// Safe while the service runs: one record per short write, compare-and-swap on the old ciphertext. Idempotent.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, dataDirOf, loadConfig } from '../shared/config.ts';
import { CredentialStore } from '../account/credentials/store.ts';
import { SealError } from '../account/credentials/seal.ts';
import type { Command } from 'commander';
import { CliError, EXIT, count, printJson } from './output.ts';
import { ioFailure } from './files.ts';

const DETAILS = `Re-seals every plugin credential in DATA_DIR/credentials.sqlite under the first key of
ACCOUNT_ENCRYPTION_KEYS. Every key that sealed a stored record must still be listed.
Step by step: put the new key first (ACCOUNT_ENCRYPTION_KEYS=new,old), restart the service,
run rotate-keys, then remove the old key and restart again.
`;

export interface RotateOptions {
  env?: Record<string, string | undefined>;
  /** Progress goes here (stderr by default); drawn in place when it is a TTY. */
  progress?: NodeJS.WritableStream & { isTTY?: boolean };
  out?: NodeJS.WritableStream;
  batch?: number;
}

export interface RotateResult { resealed: number; current: number; gone: number; failed: number; total: number }

function bar(done: number, total: number, width = 30): string {
  const filled = total === 0 ? width : Math.round((done / total) * width);
  return `[${'#'.repeat(filled)}${' '.repeat(width - filled)}] ${done}/${total}`;
}

export async function rotateKeys(opts: RotateOptions = {}): Promise<RotateResult> {
  const env = opts.env ?? process.env;
  // Run in the wrong folder it made ./data with new keys and an empty store, and said "re-sealed 0": a rotation that was not.
  const file = join(dataDirOf(env), 'credentials.sqlite');
  if (!existsSync(file)) throw new ConfigError(`DATA_DIR: there is no credential store at ${file}, so nothing to re-seal: run rotate-keys with the server's DATA_DIR (nothing was made here)`);
  const config = loadConfig(env);
  const progress = opts.progress ?? process.stderr;
  const tty = progress.isTTY === true;
  let store: CredentialStore;
  try {
    store = CredentialStore.open(config.dataDir, config.account.encryptionKeys);
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    throw ioFailure(e, 'rotate-keys', join(config.dataDir, 'credentials.sqlite')); // DATA_DIR holds something that is not the store
  }
  const result: RotateResult = { resealed: 0, current: 0, gone: 0, failed: 0, total: 0 };
  try {
    const { total } = store.count();
    result.total = total;
    progress.write(`re-sealing ${count(total, 'credential')} under key id ${store.sealer.currentKeyId}\n`);
    let done = 0;
    let lastLine = 0;
    const report = (final: boolean) => {
      if (tty) progress.write(`\r${bar(Math.min(done, total), total)}${final ? '\n' : ''}`);
      else if (final || done - lastLine >= 100) {
        progress.write(`${Math.min(done, total)}/${total}\n`);
        lastLine = done;
      }
    };
    let after = 0;
    for (;;) {
      const ids = store.rowidsAfter(after, opts.batch ?? 100);
      if (ids.length === 0) break;
      for (const rowid of ids) {
        let outcome;
        try {
          outcome = store.reseal(rowid);
        } catch (e) {
          if (!(e instanceof SealError)) throw e;
          // Left as it is (still readable by nobody): report it and go on with the others.
          progress.write(`${tty ? '\n' : ''}record ${rowid} could not be opened (${e.reason}): left unchanged\n`);
          result.failed++;
          done++;
          after = rowid;
          continue;
        }
        if (outcome === 'resealed') result.resealed++;
        else if (outcome === 'current') result.current++;
        else result.gone++;
        done++;
        after = rowid;
      }
      report(false);
      // Let the event loop (and other processes' writers) breathe between batches.
      await new Promise((r) => setImmediate(r));
    }
    report(true);
  } finally {
    store.close();
  }
  return result;
}

export function addRotateKeysCommand(program: Command): void {
  program
    .command('rotate-keys')
    .description('re-seal every stored plugin credential under the current (first) ACCOUNT_ENCRYPTION_KEYS key')
    .option('--json', 'print {"resealed", "current", "gone", "failed", "total"} (progress stays on stderr)')
    .addHelpText('after', `\n${DETAILS}`)
    .action(async (opts: { json?: boolean }) => {
      const r = await rotateKeys();
      const message = `${r.failed} credential(s) could not be opened: list every key that sealed them in ACCOUNT_ENCRYPTION_KEYS and run rotate-keys again`;
      if (opts.json) {
        printJson(r);
        if (r.failed > 0) throw new CliError(EXIT.refused, message, { jsonPrinted: true });
        return;
      }
      const extra = (r.gone > 0 ? `, ${r.gone} deleted meanwhile` : '') + (r.failed > 0 ? `, ${r.failed} could not be opened` : '');
      process.stdout.write(`re-sealed ${r.resealed}, already current ${r.current}${extra}\n`);
      if (r.failed > 0) throw new CliError(EXIT.refused, message);
    });
}
