// The soak's identity provider: a real OpenID Connect issuer (oauth2-mock-server: discovery, JWKS, authorize, token,
// userinfo) in its own process, forked by bench/soak.ts so that it does not share the load generator's event loop.
// It approves every authorization at once (no form) and signs the ID token with the nonce it was given; every
// sign-in is the same user (SOAK_EMAIL).
// IPC: it sends {issuer} once listening; it exits when the soak script goes away.
import { OAuth2Server } from 'oauth2-mock-server';

const SOAK_EMAIL = process.env.SOAK_EMAIL;
if (!process.send || !SOAK_EMAIL) throw new Error('run by bench/soak/signin.ts (forked with SOAK_EMAIL and an IPC channel)');
const idp = new OAuth2Server();
await idp.issuer.keys.generate('RS256');
idp.service.on('beforeTokenSigning', (token: { payload: Record<string, unknown> }) => Object.assign(token.payload, { email: SOAK_EMAIL, email_verified: true, name: 'Soak User' }));
idp.service.on('beforeUserinfo', (res: { body: Record<string, unknown> }) => Object.assign(res.body, { email: SOAK_EMAIL, email_verified: true, name: 'Soak User' }));
await idp.start(0, '127.0.0.1');
process.send({ issuer: idp.issuer.url });
process.on('disconnect', () => process.exit(0));
