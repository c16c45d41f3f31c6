// The options every command that talks to a running instance takes (SPEC 10), and the client they make.
import { isIP } from 'node:net';
import { Option, type Command } from 'commander';
import { baseDomainOf, ConfigError } from '../shared/config.ts';
import { createClient, ScopebaseError, type Client } from '../client/index.ts';
import { isDatabaseName, isRepoName, lowerAscii } from '../shared/names.ts';
import { derivedSecret, parseRepoPath, sameRepoTwice } from './secret.ts';
import { CliError, explain, usageError } from './output.ts';

export interface TargetOptions { url?: string; org?: string; repo?: string; database?: string; secret?: string; timeout?: string; json?: boolean }

export interface Target {
  url: string; org: string; repo: string; database: string; client: Client; json: boolean;
  /** Where the URL and the secret came from, as a message names them: the option, or the variable it was read from; null: the default. */
  urlFrom: string | null;
  secretFrom: string | null;
}

/** The options a SCOPEBASE_* variable may give (SPEC 10), and that variable. */
const FROM_ENV = { url: 'SCOPEBASE_URL', repo: 'SCOPEBASE_REPO', database: 'SCOPEBASE_DATABASE', secret: 'SCOPEBASE_SECRET' } as const;
type EnvOption = keyof typeof FROM_ENV;
/** Per parsed options: those a variable gave, so a message names the variable a user set, not a flag they never typed. */
const givenByEnv = new WeakMap<object, Set<EnvOption>>();

export function addTargetOptions(cmd: Command): Command {
  return cmd
    .hook('preAction', (_self, action) => {
      // An empty variable counts as unset, as the server reads its own: `export SCOPEBASE_SECRET=$(…)` whose command failed.
      for (const k of Object.keys(FROM_ENV) as EnvOption[]) if (action.getOptionValueSource(k) === 'env' && action.getOptionValue(k) === '') action.setOptionValueWithSource(k, undefined, 'default');
      givenByEnv.set(action.opts(), new Set((Object.keys(FROM_ENV) as EnvOption[]).filter((k) => action.getOptionValueSource(k) === 'env')));
    })
    .addOption(new Option('--url <url>', 'the server (default http://127.0.0.1:$PORT), or an org host such as http://acme.localhost:8080, optionally with the repo as its path').env('SCOPEBASE_URL'))
    .addOption(new Option('--org <org>', 'the organization (else from --repo org/repo or from an {org}.{BASE_DOMAIN} host in --url)'))
    .addOption(new Option('--repo <repo>', 'the repo: acme/web, or web with --org').env('SCOPEBASE_REPO'))
    .addOption(new Option('--database <name>', 'the database (default main)').env('SCOPEBASE_DATABASE'))
    .addOption(new Option('--secret <secret>', "the repo's secret (default: derived from RUNTIME_ROOT_KEY or the development key in DATA_DIR)").env('SCOPEBASE_SECRET'))
    .addOption(new Option('--timeout <ms>', 'give up after this many milliseconds (default 30000)'))
    .addOption(new Option('--json', 'machine-readable output (values as SPEC 4.2 encodes them)'));
}

function envInt(name: string, dflt: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return dflt;
  if (!/^\d+$/.test(raw) || Number(raw) > 65535) throw new ConfigError(`${name}: must be a port number, got ${JSON.stringify(raw.slice(0, 40))}`);
  return Number(raw);
}

/** Resolves url, org, repo, database and secret from the options, a positional `org/repo`, the URL and the environment. */
export function connect(opts: TargetOptions, positionalRepo?: string): Target {
  const baseDomain = baseDomainOf(process.env); // the server's rule: a bad one is a configuration error, not a Host it refuses
  const fromEnv = givenByEnv.get(opts);
  const sourceOf = (option: EnvOption) => (fromEnv?.has(option) ? FROM_ENV[option] : `--${option}`);
  const rawUrl = opts.url ?? `http://127.0.0.1:${envInt('PORT', 8080)}`;
  const urlName = sourceOf('url');
  let url: URL;
  try {
    url = new URL(rawUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('scheme');
  } catch {
    throw usageError(`${urlName} ${JSON.stringify(rawUrl)} is not an http(s) URL, e.g. http://127.0.0.1:8080`);
  }
  const hostname = url.hostname.toLowerCase();
  const hostOrg = hostname.endsWith(`.${baseDomain}`) && !hostname.slice(0, -baseDomain.length - 1).includes('.') ? hostname.slice(0, -baseDomain.length - 1) : undefined;
  const pathRepo = url.pathname.split('/').filter(Boolean)[0];

  let org = opts.org === undefined ? undefined : lowerAscii(opts.org);
  let repo: string | undefined;
  // SCOPEBASE_REPO is a default the positional overrides; a --repo typed beside it must agree with it.
  if (positionalRepo !== undefined && opts.repo !== undefined && fromEnv?.has('repo') !== true) sameRepoTwice(positionalRepo, opts.repo);
  const named = positionalRepo ?? opts.repo;
  const repoFromEnv = positionalRepo === undefined && fromEnv?.has('repo') === true;
  if (named?.includes('/')) {
    let parsed;
    try {
      parsed = parseRepoPath(named);
    } catch (e) {
      if (repoFromEnv && e instanceof CliError) throw usageError(`SCOPEBASE_REPO ${e.message}`); // the variable the user set
      throw e;
    }
    if (org && org !== parsed.org) throw usageError(`--org ${org} disagrees with ${named}: give the org once`);
    ({ org, repo } = parsed);
  } else if (named) {
    repo = lowerAscii(named);
  }
  // A --url that names another org or repo than the options is a mistake to say, not one to settle silently.
  if (org && hostOrg && org !== hostOrg) throw usageError(`${urlName} ${rawUrl} is the host of the org ${hostOrg}, but ${named?.includes('/') ? named : `--org ${org}`} names the org ${org}: give the org once`);
  if (repo && pathRepo && repo !== lowerAscii(pathRepo)) throw usageError(`${urlName} ${rawUrl} has the repo ${pathRepo} as its path, but ${named} names the repo ${repo}: give the repo once`);
  org ??= hostOrg;
  repo ??= pathRepo === undefined ? undefined : lowerAscii(pathRepo);
  if (!org || !repo) {
    // An org host under another domain than this shell's BASE_DOMAIN (a production URL) gives no org: say why.
    const why = !org && opts.url !== undefined && !hostOrg && hostname.includes('.') && isIP(hostname.replace(/^\[|\]$/g, '')) === 0 ? ` (${urlName}'s host ${hostname} is not {org}.${baseDomain}: export the server's BASE_DOMAIN here to read the org from it)` : '';
    throw usageError(`name the repo: a positional acme/web, --repo acme/web, or --org acme --repo web${why}`);
  }
  if (repoFromEnv && !isRepoName(repo)) throw usageError(`SCOPEBASE_REPO ${JSON.stringify(named)} is not a repo name (SPEC 2): acme/web, or web with --org`);
  parseRepoPath(`${org}/${repo}`); // checks both names
  if (opts.database !== undefined && !isDatabaseName(opts.database)) throw usageError(`${sourceOf('database')} ${JSON.stringify(opts.database)} must match ^[a-z0-9][a-z0-9_-]{0,63}$`);
  const timeoutMs = opts.timeout === undefined ? undefined : Number(opts.timeout);
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && timeoutMs > 0)) throw usageError('--timeout must be a whole number of milliseconds');

  if (opts.secret === '') throw usageError(`--secret is empty: pass the repo's secret (\`npx scopebase secret ${org}/${repo}\` prints it where the server runs), or leave --secret out to derive it here`);
  const secret = opts.secret ?? derivedSecret(org, repo);
  url.pathname = '/';
  const origin = url.origin;
  const client = createClient({ url: origin, org, repo, baseDomain, secret, database: opts.database, timeoutMs });
  return {
    url: origin, org, repo, database: opts.database ?? 'main', client, json: opts.json === true,
    urlFrom: opts.url === undefined ? null : urlName, secretFrom: opts.secret === undefined ? null : sourceOf('secret'),
  };
}

/** Runs a client call; a ScopebaseError becomes one line with what to do and its exit code. */
export async function attempt<T>(target: Target, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (e instanceof ScopebaseError) throw explain(e, target);
    throw e;
  }
}
