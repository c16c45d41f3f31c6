// What a sign-in provider does for the login and callback routes.
import type { Profile } from '../store.ts';

export interface AuthorizationRequest { redirectUri: string; state: string; codeChallenge: string; nonce: string | null }

export interface CallbackInput {
  /** The callback URL exactly as the provider called it (redirect URI + query). */
  callbackUrl: URL;
  state: string;
  codeVerifier: string;
  nonce: string | null;
}

export interface SignedIn { subject: string; profile: Profile }

export interface SignInProvider {
  /** The `provider` query value: `oidc`, `github` or `dev`. */
  id: string;
  /** The button text on the sign-in page. */
  label: string;
  /** Users are keyed by (namespace, subject); the namespace stays the same across restarts. */
  namespace: string;
  /** OIDC providers get a nonce; plain OAuth (GitHub) does not. */
  usesNonce: boolean;
  authorizationUrl(req: AuthorizationRequest): Promise<URL>;
  finish(input: CallbackInput): Promise<SignedIn>;
  /** A provider this process runs itself (the development one): its URL, for the start banner (to forward it). */
  address?: string;
  close?(): Promise<void>;
}
