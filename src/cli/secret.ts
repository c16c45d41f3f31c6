// `scopebase secret org/repo` prints a repo's shared secret; the other commands derive their default --secret the
// same way (SPEC 4.1), from RUNTIME_ROOT_KEY or the development key in DATA_DIR.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { ConfigError, dataDirOf, loadConfig } from '../shared/config.ts';
import { isOrgName, isRepoName, lowerAscii } from '../shared/names.ts';
import { parseRootKeys, repoSecret } from '../shared/secrets.ts';
import { printJson, usageError } from './output.ts';

/** Splits `org/repo` (lowercased), or fails with a usage error naming the rule. */
export function parseRepoPath(value: string): { org: string; repo: string } {
  const [org, repo, ...more] = lowerAscii(value).split('/');
  if (more.length > 0 || !org || !repo || !isOrgName(org) || !isRepoName(repo)) {
    throw usageError(`${JSON.stringify(value)} is not org/repo (names as in SPEC 2, e.g. acme/web)`);
  }
  return { org, repo };
}

/** A positional repo and --repo, both given, must name the same one (either may leave the org out). */
export function sameRepoTwice(positional: string, flag: string): void {
  const [a, b] = [positional, flag].map((s) => lowerAscii(s).split('/'));
  if (a!.at(-1) !== b!.at(-1) || (a!.length > 1 && b!.length > 1 && a![0] !== b![0])) throw usageError(`${positional} and --repo ${flag} name different repos: give the repo once`);
}

/** The repo as SPEC 10 lets a command name it: a positional or --repo `org/repo`, or --repo `repo` with --org. */
export function namedRepo(positional: string | undefined, opts: { org?: string; repo?: string }): { org: string; repo: string } {
  if (positional !== undefined && opts.repo !== undefined) sameRepoTwice(positional, opts.repo);
  const named = positional ?? opts.repo;
  if (named === undefined) throw usageError('name the repo: a positional acme/web, --repo acme/web, or --org acme --repo web');
  if (!named.includes('/') && opts.org !== undefined) return parseRepoPath(`${opts.org}/${named}`);
  const parsed = parseRepoPath(named);
  if (opts.org !== undefined && lowerAscii(opts.org) !== parsed.org) throw usageError(`--org ${opts.org} disagrees with ${named}: give the org once`);
  return parsed;
}

/** Where a development root key lives: DATA_DIR's runtime-root.key (src/shared/config.ts makes it). */
const keyFileOf = (env: Record<string, string | undefined>) => join(dataDirOf(env), 'runtime-root.key');

/** The secret the server would expect, without creating a key: a client command must not invent one. */
export function derivedSecret(org: string, repo: string, env: Record<string, string | undefined> = process.env): string {
  const raw = env.RUNTIME_ROOT_KEY;
  let keys;
  if (raw) {
    try {
      keys = parseRootKeys(raw);
    } catch (e) {
      throw new ConfigError(`RUNTIME_ROOT_KEY: ${(e as Error).message}`);
    }
  } else {
    const file = keyFileOf(env);
    if (!existsSync(file)) {
      throw new ConfigError(`no secret for ${org}/${repo}: pass --secret (print it with \`npx scopebase secret ${org}/${repo}\` where the server runs), or set RUNTIME_ROOT_KEY or DATA_DIR as the server has them (no key in ${file})`);
    }
    try {
      keys = parseRootKeys(readFileSync(file, 'utf8').trim());
    } catch (e) {
      throw new ConfigError(`RUNTIME_ROOT_KEY: the generated key file ${file} is damaged: ${(e as Error).message}`);
    }
  }
  return repoSecret(keys[0]!, org, repo);
}

export function addSecretCommand(program: Command): void {
  program
    .command('secret')
    .description("print a repo's shared secret (SPEC 4.1), derived from RUNTIME_ROOT_KEY or the development key in DATA_DIR; where there is no key yet it stops, unless --create makes one")
    .argument('[org/repo]', 'the repo, e.g. acme/web')
    .option('--org <org>', 'the organization, with --repo web')
    .option('--repo <repo>', 'the repo: acme/web, or web with --org')
    .option('--create', 'where DATA_DIR holds no key yet, make one there (as `start` would) instead of stopping')
    .option('--json', 'print {"org", "repo", "secret"}')
    .addHelpText('after', `
Example:
  curl -H "Authorization: Bearer $(npx scopebase secret acme/web)" -d '{}' http://acme.localhost:8080/web/_db/status`)
    .action((target: string | undefined, opts: { org?: string; repo?: string; create?: boolean; json?: boolean }) => {
      const { org, repo } = namedRepo(target, opts);
      const keyFile = keyFileOf(process.env);
      const creating = !process.env.RUNTIME_ROOT_KEY && !existsSync(keyFile);
      // Run outside the server's folder (an app's), a new key would print a secret the server refuses, and leave keys there.
      if (creating && !opts.create) {
        throw new ConfigError(`no key in ${keyFile}, so no secret for ${org}/${repo}: run this where the server runs, or set DATA_DIR or RUNTIME_ROOT_KEY as the server has them (--create makes a new development key there instead)`);
      }
      process.umask(0o077); // a key it creates is owner-only, as `start` makes it
      const config = loadConfig();
      if (creating) process.stderr.write(`scopebase: no key in ${keyFile} yet, so one was created; a server with another DATA_DIR or RUNTIME_ROOT_KEY will refuse this secret (run this where the server runs)\n`);
      const secret = repoSecret(config.rootKeys[0]!, org, repo);
      if (opts.json) printJson({ org, repo, secret });
      else process.stdout.write(secret + '\n');
    });
}
