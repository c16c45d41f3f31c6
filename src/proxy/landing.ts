// GET /{repo}/ in a browser when no app serves the repo (APPS): a page saying what the repo offers and who is
// signed in, instead of a bare 404. API clients keep SPEC 3's 404 JSON.
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { ResolvedSession } from '../account/contract.ts';
import { escapeHtml, sendPage, wantsHtml } from '../shared/html-page.ts';

/** `/{repo}` or `/{repo}/`, with any query: the repo's own root. */
const ROOT = /^\/[^/?]+\/?(\?.*)?$/;

/** Whether this request is a person opening the repo's root. */
export function isLandingRequest(req: FastifyRequest): boolean {
  return (req.method === 'GET' || req.method === 'HEAD') && ROOT.test(req.url) && wantsHtml(req);
}

export function sendLanding(req: FastifyRequest, reply: FastifyReply, repo: string, session: ResolvedSession | null): FastifyReply {
  const name = escapeHtml(`${req.org}/${repo}`);
  const base = `/${escapeHtml(repo)}`;
  const origin = escapeHtml(`${req.protocol}://${req.headers.host ?? ''}`);
  const u = session?.user;
  const who = u
    ? `<p>Signed in as <strong>${escapeHtml(u.name ?? u.login ?? u.email ?? u.id)}</strong>.</p>
<p><a class="button primary" href="${base}/_account/">Your account</a></p>`
    : `<p>You are not signed in.</p>
<p><a class="button primary" href="${base}/_account/login?${escapeHtml(new URLSearchParams({ return_to: `/${repo}/` }).toString())}">Sign in</a></p>`;
  return sendPage(reply, 200, `${req.org}/${repo}`, `<h1>${name}</h1>
<section class="card" aria-labelledby="who"><h2 id="who">You</h2>
${who}</section>
<section class="card" aria-labelledby="offers"><h2 id="offers">What this repository has</h2>
<dl>
<dt>Databases</dt><dd><code>POST ${origin}${base}/_db/query</code>, <code>execute</code>, <code>migrate</code>, <code>status</code> with the repo's secret (docs/database.md), or any libSQL client at <code>${origin}${base}/_db/</code> (docs/clients.md)</dd>
<dt>Sign-in</dt><dd><a href="${base}/_account/login">${origin}${base}/_account/login</a>; apps check a session at <code>${base}/_account/verify</code> (docs/accounts.md)</dd>
<dt>Credentials</dt><dd>stored for plugins on <a href="${base}/_account/">the account page</a> (docs/credentials.md)</dd>
<dt>App</dt><dd><span class="muted">none: the operator serves one here with <code>APPS</code> (docs/deploy.md)</span></dd>
</dl></section>`);
}
