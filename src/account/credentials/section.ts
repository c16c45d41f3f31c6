// The account page's credentials section: names, field names and dates; never a value. Works without JavaScript.
import type { FastifyRequest } from 'fastify';
import { escapeHtml, timeHtml } from '../../shared/html-page.ts';
import type { AuditEntry } from './audit.ts';
import type { CredentialMeta } from './store.ts';
import { CREDENTIAL_NAME, isExpired } from './input.ts';
import { RUNTIME_ACTOR } from './routes.ts';

/** Messages for the status a form post redirects back with; nothing from the query string is echoed. */
const NOTICES: Record<string, string> = {
  created: 'Credential stored.',
  replaced: 'Credential replaced.',
  deleted: 'Credential deleted.',
};
const ERRORS: Record<string, string> = {
  invalid_name: 'Plugin and name must be lowercase letters, digits, ".", "_" or "-" (at most 64, starting with a letter or digit).',
  invalid_request: 'The form was not valid: a JSON value must be an object, and an expiry date must be in the future.',
  payload_too_large: 'The value is too large (the limit is 64 KiB).',
  quota_exceeded: 'You have reached the limit of credentials: 100 for this repository, 1,000 in all repositories of this organization together.',
  not_found: 'That credential does not exist (any more).',
};

const when = (iso: string | null) => (iso === null ? '<span class="muted">never</span>' : timeHtml(iso));

function valueFields(prefix: string, json = false): string {
  return `<label for="${prefix}-value">New value</label>
<textarea id="${prefix}-value" name="value" rows="2" required autocomplete="off" spellcheck="false"></textarea>
<label for="${prefix}-type">Kind of value</label>
<select id="${prefix}-type" name="type"><option value="text">Text (stored as a string)</option><option value="json"${json ? ' selected' : ''}>JSON object</option></select>
<label for="${prefix}-expires">Expires (UTC, optional)</label>
<input id="${prefix}-expires" name="expiresAt" type="datetime-local">`;
}

function credentialCard(repo: string, c: CredentialMeta, i: number): string {
  const action = `/${escapeHtml(repo)}/_account/credentials/${escapeHtml(c.plugin)}/${escapeHtml(c.name)}`;
  const fields = c.fields.length === 0 ? '<span class="muted">a text value</span>' : c.fields.map((f) => `<code>${escapeHtml(f)}</code>`).join(', ');
  const expired = isExpired(c.expiresAt) ? ' <strong class="expired">expired</strong>' : '';
  return `<div class="card credential" data-plugin="${escapeHtml(c.plugin)}" data-name="${escapeHtml(c.name)}">
<h3><code>${escapeHtml(c.plugin)}</code> / <code>${escapeHtml(c.name)}</code>${expired}</h3>
<dl><dt>Fields</dt><dd>${fields}</dd><dt>Created</dt><dd>${when(c.createdAt)}</dd><dt>Updated</dt><dd>${when(c.updatedAt)}</dd><dt>Expires</dt><dd>${when(c.expiresAt)}</dd></dl>
<details><summary>Replace</summary>
<form method="post" action="${action}">
<input type="hidden" name="_method" value="put">
${valueFields(`c${i}`)}
<p><button type="submit" class="primary">Replace ${escapeHtml(c.plugin)}/${escapeHtml(c.name)}</button></p>
</form>
</details>
<form method="post" action="${action}">
<input type="hidden" name="_method" value="delete">
<p><button type="submit" class="danger">Delete ${escapeHtml(c.plugin)}/${escapeHtml(c.name)}</button></p>
</form>
</div>`;
}

function auditTable(entries: AuditEntry[], userId: string): string {
  if (entries.length === 0) return '<p class="muted">No activity yet.</p>';
  const rows = entries.map((e) => {
    const who = e.actor === RUNTIME_ACTOR ? 'the runtime (repo secret)' : e.actor === userId ? 'you' : e.actor;
    return `<tr><td>${when(e.at)}</td><td>${escapeHtml(e.action)}</td><td><code>${escapeHtml(e.plugin)}/${escapeHtml(e.name)}</code></td><td>${escapeHtml(who)}</td></tr>`;
  }).join('\n');
  return `<table class="audit"><thead><tr><th scope="col">When</th><th scope="col">What</th><th scope="col">Credential</th><th scope="col">Who</th></tr></thead>
<tbody>
${rows}
</tbody></table>`;
}

export interface SectionData {
  repo: string;
  userId: string;
  credentials: CredentialMeta[];
  audit: AuditEntry[];
}

/** What exactly was wrong with the form (routes.ts adds it as ?problem=): fixed words, nothing echoed. */
const PROBLEMS: Record<string, string> = {
  value_json: 'The value is not valid JSON: with "JSON object" chosen it must be an object such as {"token": "…"}; choose "Text" for a plain string.',
  value_object: 'A JSON value must be an object such as {"token": "…"}, not a list, a number or a string; choose "Text" for a plain string.',
  value_missing: 'Enter a value.',
  value_deep: 'The JSON object nests too deeply: at most 64 levels of objects and lists.',
  expiry: 'The expiry must be a real date and time in the future, or left empty.',
};

/** CREDENTIAL_NAME in words, shown by the form and in the browser's own complaint (title). */
const NAME_RULE = escapeHtml('lowercase letters, digits, ".", "_" or "-", starting with a letter or digit, up to 64');

/** A name from the query string, filled into the form again only if it is a valid credential name. */
const refill = (v: unknown): string => (typeof v === 'string' && CREDENTIAL_NAME.test(v) ? ` value="${escapeHtml(v)}"` : '');

export function renderSection(req: FastifyRequest, d: SectionData): string {
  const q = (req.query ?? {}) as Record<string, unknown>;
  const status = typeof q.credentials === 'string' ? NOTICES[q.credentials] : undefined;
  const problem = typeof q.problem === 'string' ? PROBLEMS[q.problem] : undefined;
  const error = typeof q.credentials_error === 'string' ? (problem ?? ERRORS[q.credentials_error] ?? 'The change could not be made.') : undefined;
  const notice = error ? `<p class="card error" role="alert">${escapeHtml(error)}</p>` : status ? `<p class="card" role="status">${escapeHtml(status)}</p>` : '';
  const list = d.credentials.length === 0
    ? '<p class="muted">No credentials stored for this repository.</p>'
    : d.credentials.map((c, i) => credentialCard(d.repo, c, i)).join('\n');
  return `<section id="credentials" aria-labelledby="credentials-title">
<h2 id="credentials-title">Plugin credentials</h2>
${notice}
<p class="muted">Values are sealed at rest and never shown here, not even to you. This repository's plugins read them with the repository's secret.</p>
${list}
<div class="card">
<h3>Add a credential</h3>
<form method="post" action="/${escapeHtml(d.repo)}/_account/credentials/form">
<input type="hidden" name="_method" value="put">
<label for="new-plugin">Plugin</label>
<input id="new-plugin" name="plugin" required pattern="[a-z0-9][a-z0-9._\\-]{0,63}" maxlength="64" title="${NAME_RULE}" aria-describedby="name-rule" autocomplete="off"${error ? refill(q.plugin) : ''}>
<label for="new-name">Name</label>
<input id="new-name" name="name" required pattern="[a-z0-9][a-z0-9._\\-]{0,63}" maxlength="64" title="${NAME_RULE}" aria-describedby="name-rule" autocomplete="off"${error ? refill(q.name) : ''}>
<p id="name-rule" class="muted">Plugin and name: ${NAME_RULE}, e.g. <code>github</code> / <code>token</code>.</p>
${valueFields('new', error !== undefined && q.type === 'json')}
<p><button type="submit" class="primary">Store credential</button></p>
</form>
</div>
<h3>Recent activity</h3>
${auditTable(d.audit, d.userId)}
</section>`;
}
