// A signed-in user for tests: a real session in the account service's own store (src/account/store.ts),
// exactly what the sign-in callback creates, so the real session resolver accepts its cookie.
import type { Config } from '../../src/shared/config.ts';
import { AccountStore } from '../../src/account/store.ts';
import { SESSION_COOKIE, cookieName } from '../../src/account/cookies.ts';

export interface SignInTarget {
  dataDir: string;
  config: Config;
}

export interface SignedIn {
  /** The Cookie header to send. */
  cookie: string;
  userId: string;
}

/** Creates (or finds) the user `login` and a session for it on `org`; returns the cookie and the user's id. */
export async function signInUser(product: SignInTarget, org: string, login: string): Promise<SignedIn> {
  const store = new AccountStore(product.dataDir);
  try {
    const user = store.upsertUser('test', login, { name: login, email: `${login}@example.test`, login, avatarUrl: null });
    const session = store.createSession(org, user.id, product.config.account.sessionTtlMs);
    return { cookie: `${cookieName(SESSION_COOKIE, false)}=${session.token}`, userId: user.id };
  } finally {
    store.close();
  }
}

/** The Cookie header of a fresh session of `user` on `org`. */
export async function signIn(product: SignInTarget, org: string, user: string): Promise<string> {
  return (await signInUser(product, org, user)).cookie;
}
