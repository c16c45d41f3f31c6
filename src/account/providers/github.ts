// GitHub's OAuth (not OIDC): openid-client for state and PKCE, then the user and the primary verified email from the API.
import * as oidc from 'openid-client';
import { ApiError } from '../../shared/errors.ts';
import type { AuthorizationRequest, CallbackInput, SignInProvider, SignedIn } from './types.ts';
import { providerError } from './errors.ts';
import { boundedFetch } from './bounded-fetch.ts';

export interface GitHubOptions {
  clientId: string;
  clientSecret: string;
  timeoutMs: number;
  /** Overridable for tests against a local stand-in; GitHub's own by default. */
  webUrl?: string;
  apiUrl?: string;
}

function str(v: unknown): string | null {
  return typeof v === 'string' && v.length > 0 ? v : null;
}

export function createGitHubProvider(o: GitHubOptions): SignInProvider {
  const web = o.webUrl ?? 'https://github.com';
  const api = o.apiUrl ?? 'https://api.github.com';
  const config = new oidc.Configuration(
    { issuer: web, authorization_endpoint: `${web}/login/oauth/authorize`, token_endpoint: `${web}/login/oauth/access_token` },
    o.clientId, undefined, oidc.ClientSecretPost(o.clientSecret),
  );
  config.timeout = o.timeoutMs / 1000;
  config[oidc.customFetch] = boundedFetch; // the code exchange and the API answers are read to a bound
  if (web.startsWith('http:') || api.startsWith('http:')) oidc.allowInsecureRequests(config);

  const getJson = async (token: string, path: string): Promise<unknown> => {
    const headers = new Headers({ accept: 'application/vnd.github+json', 'user-agent': 'scopebase', 'x-github-api-version': '2022-11-28' });
    const res = await oidc.fetchProtectedResource(config, token, new URL(`${api}${path}`), 'GET', undefined, headers);
    if (res.status >= 500) throw res;
    if (!res.ok) throw new ApiError('unauthenticated', `GitHub answered ${res.status} to ${path}`, { provider: 'github', step: 'user lookup' });
    return res.json();
  };

  return {
    id: 'github', label: 'GitHub', namespace: 'github', usesNonce: false,
    async authorizationUrl(r: AuthorizationRequest): Promise<URL> {
      return oidc.buildAuthorizationUrl(config, {
        redirect_uri: r.redirectUri, scope: 'read:user user:email', state: r.state,
        code_challenge: r.codeChallenge, code_challenge_method: 'S256', allow_signup: 'true',
      });
    },
    async finish(input: CallbackInput): Promise<SignedIn> {
      let accessToken: string;
      try {
        const tokens = await oidc.authorizationCodeGrant(config, input.callbackUrl, { pkceCodeVerifier: input.codeVerifier, expectedState: input.state });
        accessToken = tokens.access_token;
      } catch (err) {
        throw providerError(err, 'github', 'code exchange');
      }
      try {
        const user = (await getJson(accessToken, '/user')) as Record<string, unknown>;
        if (typeof user.id !== 'number' && typeof user.id !== 'string') throw new ApiError('unauthenticated', 'GitHub returned no user id', { provider: 'github' });
        let email: string | null = null;
        try {
          const emails = (await getJson(accessToken, '/user/emails')) as Record<string, unknown>[];
          // Only the primary address, and only once GitHub has verified it.
          const primary = Array.isArray(emails) ? emails.find((e) => e.primary === true && e.verified === true) : undefined;
          email = primary ? str(primary.email) : null;
        } catch (err) {
          if (!(err instanceof ApiError)) throw err; // a scope without user:email is not fatal: no email then
        }
        const login = str(user.login);
        return { subject: String(user.id), profile: { login, email, name: str(user.name) ?? login, avatarUrl: str(user.avatar_url) } };
      } catch (err) {
        throw providerError(err, 'github', 'user lookup');
      }
    },
  };
}
