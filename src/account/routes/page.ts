// GET / : the account page (plain HTML, works without JavaScript): who is signed in, sign out, this repo's credentials.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkRepo } from '../../shared/names.ts';
import { credentialsSection } from '../credentials/index.ts';
import { escapeHtml, sendPage, timeHtml } from '../../shared/html-page.ts';
import type { Sessions } from '../sessions.ts';

type Req = FastifyRequest<{ Params: { repo: string } }>;

export async function pageRoutes(app: FastifyInstance, deps: { sessions: Sessions }): Promise<void> {
  app.get('/', async (req: Req, reply) => {
    const repo = checkRepo(req.params.repo);
    const session = await deps.sessions.resolve(req);
    const base = `/${repo}/_account`;
    if (!session) {
      const login = `${base}/login?${new URLSearchParams({ return_to: `${base}/` })}`;
      const signedOut = (req.query as Record<string, unknown>).signed_out === '1';
      return sendPage(reply, 200, signedOut ? 'Signed out' : 'Not signed in', `<h1>${signedOut ? 'Signed out' : 'Not signed in'}</h1>
${signedOut ? `<div class="card" role="status"><p>You are signed out of <strong>${escapeHtml(req.org)}</strong> on this browser.</p></div>\n` : ''}<div class="card"><p>You are not signed in to <strong>${escapeHtml(req.org)}</strong>.</p>
<p><a class="button primary" href="${escapeHtml(login)}">Sign in</a></p></div>`);
    }
    const u = session.user;
    const row = (label: string, value: string | null) => `<dt>${escapeHtml(label)}</dt><dd>${value ? escapeHtml(value) : '<span class="muted">—</span>'}</dd>`;
    const avatar = u.avatarUrl && /^https:\/\//.test(u.avatarUrl) ? `<img class="avatar" src="${escapeHtml(u.avatarUrl)}" alt="">` : '';
    const credentials = await credentialsSection(req, session, repo);
    return sendPage(reply, 200, 'Your account', `<h1>Your account</h1>
<section class="card" aria-labelledby="who">
${avatar}<h2 id="who">Signed in as ${escapeHtml(u.name ?? u.login ?? u.email ?? u.id)}</h2>
<dl>
${row('Email', u.email)}
${row('Login', u.login)}
${row('User id', u.id)}
${row('Organization', session.org)}
${row('Repository', repo)}
<dt>Session expires</dt><dd>${timeHtml(session.expiresAt)}</dd>
</dl>
<form method="post" action="${escapeHtml(base)}/logout">
<input type="hidden" name="return_to" value="${escapeHtml(base)}/?signed_out=1">
<p><button class="danger" type="submit">Sign out</button></p>
</form>
</section>
${credentials}
<p><a href="/${escapeHtml(repo)}/">Back to ${escapeHtml(repo)}</a></p>`);
  });
}
