// The configured sign-in providers: an OIDC issuer and/or GitHub, or the development provider on a fresh machine.
import type { Config } from '../../shared/config.ts';
import type { Logger } from '../../shared/log.ts';
import { createOidcProvider } from './oidc.ts';
import { createGitHubProvider, type GitHubOptions } from './github.ts';
import { startDevIdp } from './dev-idp.ts';
import type { SignInProvider } from './types.ts';

export type { SignInProvider } from './types.ts';

export interface ProviderOptions {
  timeoutMs: number;
  /** Test seam: GitHub's web and API addresses. */
  github?: Pick<GitHubOptions, 'webUrl' | 'apiUrl'>;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

export async function createProviders(config: Config, logger: Logger, opts: ProviderOptions): Promise<SignInProvider[]> {
  const list: SignInProvider[] = [];
  const { oidc, github } = config.account;
  if (oidc) {
    const host = new URL(oidc.issuer).host;
    list.push(createOidcProvider({
      id: 'oidc', label: host, namespace: `oidc:${oidc.issuer}`, issuer: oidc.issuer, clientId: oidc.clientId, clientSecret: oidc.clientSecret,
      timeoutMs: opts.timeoutMs, allowHttp: !config.production || /^(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$/.test(host),
    }));
  }
  if (github) list.push(createGitHubProvider({ ...github, ...opts.github, timeoutMs: opts.timeoutMs }));
  if (list.length === 0) {
    if (config.production) throw new Error('no sign-in provider: set ACCOUNT_OIDC_ISSUER (with ACCOUNT_OIDC_CLIENT_ID) or ACCOUNT_GITHUB_CLIENT_ID (with ACCOUNT_GITHUB_CLIENT_SECRET)');
    const callbackPattern = new RegExp(`^https?://[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.${escapeRegExp(config.baseDomain)}(:\\d{1,5})?/[a-z0-9][a-z0-9._-]{0,99}/_account/callback$`);
    const idp = await startDevIdp({ logger: logger.child({ component: 'dev-idp' }), port: config.account.devIdpPort, callbackPattern });
    logger.warn({ issuer: idp.issuer }, 'no sign-in provider configured: running the development identity provider (any email signs in)');
    const dev = createOidcProvider({
      id: 'dev', label: 'Development sign-in', namespace: 'dev', issuer: idp.issuer, clientId: idp.clientId, clientSecret: idp.clientSecret,
      timeoutMs: opts.timeoutMs, allowHttp: true, extraParams: { prompt: 'login' },
    });
    list.push({ ...dev, address: idp.issuer, close: idp.close });
  }
  return list;
}
