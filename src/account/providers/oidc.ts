// Any OpenID Connect issuer through openid-client v6: discovery, state, PKCE S256, nonce, ID token and issuer checks.
import * as oidc from 'openid-client';
import type { AuthorizationRequest, CallbackInput, SignInProvider, SignedIn } from './types.ts';
import { providerError } from './errors.ts';
import { boundedFetch } from './bounded-fetch.ts';
import { withoutTrailingSlashes } from '../../shared/names.ts';

export interface OidcOptions {
  id: string;
  label: string;
  namespace: string;
  issuer: string;
  clientId: string;
  clientSecret: string | undefined;
  timeoutMs: number;
  /** Plain-HTTP issuers are allowed outside production, and on loopback always (the development provider). */
  allowHttp: boolean;
  /** Extra authorization parameters, e.g. `prompt=login` so the development form always shows. */
  extraParams?: Record<string, string>;
}

function str(v: unknown): string | null {
  return typeof v === 'string' && v.length > 0 ? v : null;
}

/**
 * Whether `email_verified` lets the email count: absent (the provider says nothing, as oauth2-proxy reads it), true,
 * or the string "true" some userinfo endpoints send (AWS Cognito's). Any other value (false, "false", 0) does not:
 * read as "not false", the string "false" let an unverified address reach apps as x-auth-user-email.
 */
function emailVerified(v: unknown): boolean {
  return v === undefined || v === true || (typeof v === 'string' && v.toLowerCase() === 'true');
}

/** The issuer a discovery document stated, when it is what failed the exact comparison with the configured one. */
function issuerStated(err: unknown): string | null {
  const e = err as { code?: string; cause?: { attribute?: string; body?: { issuer?: unknown } } };
  if (e.code !== 'OAUTH_JSON_ATTRIBUTE_COMPARISON_FAILED' || e.cause?.attribute !== 'issuer') return null;
  return typeof e.cause.body?.issuer === 'string' ? e.cause.body.issuer : null;
}

export function createOidcProvider(o: OidcOptions): SignInProvider {
  let discovered: Promise<oidc.Configuration> | null = null;
  const discover = (issuer: URL) => oidc.discovery(issuer, o.clientId, o.clientSecret ? { client_secret: o.clientSecret } : undefined,
    o.clientSecret ? undefined : oidc.None(),
    // customFetch given here is kept by the configuration: every later call (token, userinfo, JWKS) is bounded too.
    { timeout: o.timeoutMs / 1000, execute: o.allowHttp && o.issuer.startsWith('http:') ? [oidc.allowInsecureRequests] : [], [oidc.customFetch]: boundedFetch },
  );
  const configuration = (): Promise<oidc.Configuration> => {
    // Cached once it worked; a failed discovery is retried on the next sign-in.
    discovered ??= discover(new URL(o.issuer)).catch((err) => {
      // The issuer is compared exactly, and ACCOUNT_OIDC_ISSUER is read without a trailing `/`: one whose identifier
      // has it (authentik's `…/application/o/{slug}/`) is taken as its discovery states it, when that is all that differs.
      const stated = issuerStated(err);
      if (stated !== null && withoutTrailingSlashes(stated) === withoutTrailingSlashes(o.issuer)) return discover(new URL(stated));
      throw err;
    }).catch((err) => {
      discovered = null;
      throw providerError(err, o.id, 'discovery');
    });
    return discovered;
  };

  return {
    id: o.id, label: o.label, namespace: o.namespace, usesNonce: true,
    async authorizationUrl(r: AuthorizationRequest): Promise<URL> {
      const config = await configuration();
      return oidc.buildAuthorizationUrl(config, {
        redirect_uri: r.redirectUri, scope: 'openid email profile', state: r.state,
        code_challenge: r.codeChallenge, code_challenge_method: 'S256', nonce: r.nonce ?? '', ...o.extraParams,
      });
    },
    async finish(input: CallbackInput): Promise<SignedIn> {
      const config = await configuration();
      let tokens: Awaited<ReturnType<typeof oidc.authorizationCodeGrant>>;
      try {
        tokens = await oidc.authorizationCodeGrant(config, input.callbackUrl, {
          pkceCodeVerifier: input.codeVerifier, expectedState: input.state, expectedNonce: input.nonce ?? undefined, idTokenExpected: true,
        });
      } catch (err) {
        throw providerError(err, o.id, 'code exchange');
      }
      const claims = tokens.claims();
      if (!claims) throw providerError(new Error('no ID token'), o.id, 'code exchange');
      let info: Record<string, unknown> = { ...claims };
      if (config.serverMetadata().userinfo_endpoint && tokens.access_token) {
        try {
          info = { ...info, ...(await oidc.fetchUserInfo(config, tokens.access_token, claims.sub)) };
        } catch (err) {
          throw providerError(err, o.id, 'user lookup');
        }
      }
      // An unverified email is not the user's to claim: keep it out of x-auth-user-email.
      const email = emailVerified(info.email_verified) ? str(info.email) : null;
      return {
        subject: claims.sub,
        profile: {
          email,
          name: str(info.name) ?? str(info.preferred_username) ?? email,
          login: str(info.preferred_username) ?? str(info.nickname) ?? (email ? email.split('@')[0]! : null),
          avatarUrl: str(info.picture),
        },
      };
    },
  };
}
