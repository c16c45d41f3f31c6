// The built-in development identity provider: a real OpenID Connect provider (oidc-provider) on its own loopback port,
// with a one-field sign-in form. Never started under NODE_ENV=production.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Ctx, ErrorOut, PageCtx, Provider as OidcProvider } from 'oidc-provider';
import type { Logger } from '../../shared/log.ts';
import { escapeHtml, page, PAGE_CSP } from '../../shared/html-page.ts';
import { MemoryAdapter } from './dev-idp-adapter.ts';
import { requestIdOf } from '../../shared/raw-route.ts';
import { answerClientError, limitSlowClients } from '../../shared/client-errors.ts';

export interface DevIdp { issuer: string; clientId: string; clientSecret: string; close(): Promise<void> }

interface DevAccount { sub: string; email: string; name: string; login: string }

const EMAIL = /^[^\s@<>"]{1,64}@[^\s@<>"]{1,190}$/;

// The sign-in form's answer redirects to the application (another origin): form-action 'self' would block that in Chromium.
// `script-src 'self'` lets oidc-provider add the hash of its one inline script (the form_post and logout auto-submit).
const IDP_CSP = PAGE_CSP.replace(" form-action 'self';", '').replace(" img-src 'self' https: data:;", " script-src 'self';");

function send(res: ServerResponse, status: number, html: string): void {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'content-security-policy': IDP_CSP, 'x-frame-options': 'DENY' });
  res.end(html);
}

function readForm(req: IncomingMessage, limit = 4096): Promise<URLSearchParams> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
      if (body.length > limit) req.destroy(new Error('form too large'));
    });
    req.on('end', () => resolve(new URLSearchParams(body)));
    req.on('error', reject);
  });
}

function loginForm(uid: string, client: string, error?: string): string {
  return page('Development sign-in', `
<h1>Development sign-in</h1>
<p class="muted">This is scopebase's built-in identity provider for local development. Any email address signs in; nothing is checked.
It never runs under <code>NODE_ENV=production</code>.</p>
${error ? `<p class="card error" role="alert">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${escapeHtml(uid)}" class="card">
  <label for="email">Email</label>
  <input id="email" name="email" type="text" inputmode="email" required autocomplete="email" value="dev@example.com">
  <label for="name">Name</label>
  <input id="name" name="name" type="text" autocomplete="name" value="Dev User" maxlength="100">
  <p><button class="primary" type="submit">Sign in</button></p>
</form>
<p class="muted">Signing in to <code>${escapeHtml(client)}</code>.</p>`);
}

function ours(ctx: PageCtx, title: string, body: string): void {
  ctx.type = 'html';
  ctx.set({ 'cache-control': 'no-store', 'content-security-policy': IDP_CSP, 'x-frame-options': 'DENY' });
  ctx.body = page(title, body);
}

/** An error oidc-provider renders itself (an unknown client, a redirect URI not allowed): its code and text, escaped. */
async function errorPage(ctx: PageCtx, out: ErrorOut): Promise<void> {
  ours(ctx, 'Sign-in failed', `<h1>Sign-in failed</h1>
<div class="card error" role="alert"><p>${escapeHtml(out.error_description ?? out.error)}</p><p class="muted">Error code: <code>${escapeHtml(out.error)}</code></p></div>
<p>The development identity provider could not go on with this request. Go back to the application and start the sign-in again.</p>`);
}

/** RP-initiated logout's confirmation; `form` is oidc-provider's (its action and xsrf token), the buttons submit it. */
async function logoutPage(ctx: PageCtx, form: string): Promise<void> {
  ours(ctx, 'Sign out', `<h1>Sign out of the development provider?</h1>
${form}
<p><button class="primary" autofocus type="submit" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>
<button type="submit" form="op.logoutForm">No, stay signed in</button></p>`);
}

async function signedOutPage(ctx: PageCtx): Promise<void> {
  ours(ctx, 'Signed out', '<h1>Signed out</h1>\n<p>You are signed out of the development identity provider.</p>');
}

/** `callbackPattern` decides which redirect URIs the development client may use (any org and repo on BASE_DOMAIN). */
export async function startDevIdp(opts: { logger: Logger; host?: string; port?: number; callbackPattern: RegExp }): Promise<DevIdp> {
  const host = opts.host ?? '127.0.0.1';
  const accounts = new Map<string, DevAccount>();
  const clientId = 'scopebase-dev';
  const clientSecret = randomBytes(32).toString('base64url');
  const server = createServer();
  // What the parser refuses gets SPEC 3's shape here too, and slow clients the product's time limits.
  server.on('clientError', answerClientError);
  limitSlowClients(server);
  // DEV_IDP_PORT (0: any free port); a taken one rejects, for start's "port in use" line, instead of crashing later.
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const issuer = `http://${host}:${(server.address() as AddressInfo).port}`;

  // oidc-provider (~20 MB of heap and code) and its RSA key are only built on the first sign-in, not at start-up.
  let ready: Promise<{ provider: OidcProvider; handle: (req: IncomingMessage, res: ServerResponse) => void }> | null = null;
  const build = async () => {
    const { default: Provider } = await import('oidc-provider');
    const provider: OidcProvider = new Provider(issuer, {
      clients: [{ client_id: clientId, client_secret: clientSecret, redirect_uris: ['http://acme.localhost/web/_account/callback'], grant_types: ['authorization_code'], response_types: ['code'] }],
      jwks: { keys: [{ ...generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' }), use: 'sig', alg: 'RS256' }] },
      cookies: { keys: [randomBytes(32).toString('base64url')] },
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username'] },
      features: {
        devInteractions: { enabled: false },
        // oidc-provider's own pages import Google Fonts: ours load nothing from anywhere else (docs/accounts.md).
        rpInitiatedLogout: { enabled: true, logoutSource: logoutPage, postLogoutSuccessSource: signedOutPage },
      },
      renderError: errorPage,
      adapter: MemoryAdapter,
      ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 600, Interaction: 600, Session: 3600, Grant: 3600 },
      interactions: { url: (_ctx: unknown, interaction: { uid: string }) => `/interaction/${interaction.uid}` },
      findAccount: async (_ctx: unknown, sub: string) => {
        const a = accounts.get(sub);
        if (!a) return undefined;
        return { accountId: sub, claims: async () => ({ sub, email: a.email, email_verified: true, name: a.name, preferred_username: a.login }) };
      },
      // First-party development client: consent is implied, so grant what was asked.
      loadExistingGrant: async (ctx: Ctx) => {
        const id = ctx.oidc.result?.consent?.grantId ?? ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
        if (id) return provider.Grant.find(id);
        if (!ctx.oidc.session.accountId) return undefined;
        const grant = new provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
        grant.addOIDCScope('openid email profile');
        await grant.save();
        return grant;
      },
    });
    // Any org and repo may sign in, so the exact-match redirect URI list gives way to the product's own callback shape.
    provider.Client.prototype.redirectUriAllowed = (uri: string) => opts.callbackPattern.test(uri);
    provider.on('server_error', (_ctx, err) => opts.logger.error({ err }, 'development identity provider error'));

    return { provider, handle: provider.callback() };
  };

  // Where each sign-in page's attempt came from (its repo's page), for the page reached again with Back once used.
  const startedAt = new Map<string, { href: string; label: string }>();
  const remember = (uid: string, redirectUri: unknown) => {
    // Only a redirect URI the callback pattern allows (an org host's own callback), so the link is never an open redirect.
    if (typeof redirectUri !== 'string' || !opts.callbackPattern.test(redirectUri)) return;
    const href = redirectUri.replace(/_account\/callback$/, '');
    const url = new URL(href); // parsed here, in the interaction: the page below is made in a .catch, which must not throw
    startedAt.delete(uid);
    startedAt.set(uid, { href, label: url.host + url.pathname });
    if (startedAt.size > 1000) startedAt.delete(startedAt.keys().next().value!);
  };

  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    res.setHeader('x-request-id', requestIdOf(req)); // SPEC 3: every response, the development provider's too
    res.setHeader('content-security-policy', IDP_CSP); // whatever page oidc-provider makes, it loads nothing from elsewhere
    const m = /^\/interaction\/([A-Za-z0-9_-]{1,64})$/.exec(req.url?.split('?')[0] ?? '');
    (ready ??= build()).then(({ provider, handle }) => (m ? interaction(provider, req, res, m[1]!) : handle(req, res))).catch((err) => {
      opts.logger.warn({ err: { message: (err as Error).message } }, 'development sign-in failed');
      if (res.headersSent) return;
      if (!m) return send(res, 400, page('Sign-in failed', '<h1>Sign-in failed</h1><p>This sign-in attempt expired. Go back to the application and start again.</p>'));
      // Mostly Back after signing in: the page's attempt is finished, and the session it made is likely valid.
      const back = startedAt.get(m[1]!);
      const link = back ? `<p><a class="button primary" href="${escapeHtml(back.href)}">Back to ${escapeHtml(back.label)}</a></p>` : '<p>Go back to the application; sign in there again if you need to.</p>';
      send(res, 400, page('Sign-in page already used', `<h1>This sign-in page was already used</h1><p>You may already be signed in. A sign-in page works once, for 10 minutes; to sign in again, start from the application.</p>${link}`));
    });
  });

  async function interaction(provider: OidcProvider, req: IncomingMessage, res: ServerResponse, uid: string): Promise<void> {
    const details = await provider.interactionDetails(req, res);
    remember(uid, details.params.redirect_uri);
    const client = String(details.params.client_id ?? '');
    if (req.method === 'GET') return send(res, 200, loginForm(uid, client));
    if (req.method !== 'POST') return send(res, 405, page('Method not allowed', '<h1>Method not allowed</h1>'));
    const form = await readForm(req);
    const email = (form.get('email') ?? '').trim().toLowerCase();
    if (!EMAIL.test(email)) return send(res, 400, loginForm(uid, client, 'Enter an email address.'));
    const name = (form.get('name') ?? '').trim().slice(0, 100) || email.split('@')[0]!;
    const sub = `dev-${createHash('sha256').update(email).digest('hex').slice(0, 24)}`;
    accounts.set(sub, { sub, email, name, login: email.split('@')[0]! });
    await provider.interactionFinished(req, res, { login: { accountId: sub } }, { mergeWithLastSubmission: false });
  }

  return {
    issuer, clientId, clientSecret,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
