// `scopebase secret org/repo`: prints the repo's shared secret, derived from the current root key.
import { loadConfig } from '../shared/config.ts';
import { isOrgName, isRepoName } from '../shared/names.ts';
import { repoSecret } from '../shared/secrets.ts';

export async function secretCommand(args: string[]): Promise<number> {
  const [target] = args;
  const [org, repo] = (target ?? '').toLowerCase().split('/');
  if (args.length !== 1 || org === undefined || repo === undefined || !isOrgName(org) || !isRepoName(repo)) {
    process.stderr.write('usage: scopebase secret org/repo   (names as in SPEC 2, e.g. acme/web)\n');
    return 2;
  }
  const config = loadConfig();
  process.stdout.write(repoSecret(config.rootKeys[0]!, org, repo) + '\n');
  return 0;
}
