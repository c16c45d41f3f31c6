// The HTML shell of every page a person sees (account pages, errors): plain, accessible markup with a little inline
// CSS; no script, no build step.
import type { FastifyReply, FastifyRequest } from 'fastify';
import { nameRuleInWords } from './names.ts';

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for HTML element content and quoted attribute values. */
export function escapeHtml(value: unknown): string {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

const CSS = `
:root{color-scheme:light dark;--fg:#1b1f24;--muted:#57606a;--bg:#fff;--card:#f6f8fa;--line:#d0d7de;--accent:#0969da;--danger:#cf222e}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#9da7b3;--bg:#0d1117;--card:#161b22;--line:#30363d;--accent:#4493f8;--danger:#f85149}}
*{box-sizing:border-box}body{margin:0;font:16px/1.5 system-ui,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:40rem;margin:3rem auto;padding:0 1rem}h1{font-size:1.5rem;margin:0 0 1rem}h2{font-size:1.15rem;margin:2rem 0 .5rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:1rem 1.25rem;margin:1rem 0}
.card>:first-child,.card>img:first-child+*{margin-top:0}.card>:last-child{margin-bottom:0}
.muted{color:var(--muted)}a{color:var(--accent)}dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0}dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}
.button,button{display:inline-block;font:inherit;padding:.45rem 1rem;border-radius:6px;border:1px solid var(--line);background:var(--bg);color:var(--fg);cursor:pointer;text-decoration:none}
.button.primary,button.primary{background:var(--accent);border-color:var(--accent);color:#fff}button.danger{color:var(--danger)}
.button:focus-visible,button:focus-visible,a:focus-visible,input:focus-visible,textarea:focus-visible,select:focus-visible{outline:3px solid var(--accent);outline-offset:2px}
ul.providers{list-style:none;padding:0}ul.providers li{margin:.5rem 0}
label{display:block;margin:.75rem 0 .25rem}input,textarea,select{font:inherit;padding:.4rem;width:100%;border:1px solid var(--line);border-radius:6px;background:var(--bg);color:var(--fg)}
img.avatar{width:64px;height:64px;border-radius:50%;float:right}.error{border-color:var(--danger)}
`;

/** A moment as every page shows it: `2026-11-25 05:40:12 UTC`, machine-readable in `datetime`. */
export function timeHtml(at: string | Date): string {
  const iso = typeof at === 'string' ? at : at.toISOString();
  return `<time datetime="${escapeHtml(iso)}">${escapeHtml(iso.replace('T', ' ').replace(/\.\d+Z$/, ' UTC').replace(/Z$/, ' UTC'))}</time>`;
}

/** The page shell; `body` must already be escaped HTML. */
export function page(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>${escapeHtml(title)}</title>
<style>${CSS}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

/** No script runs on these pages; styles are inline; forms only post back to this origin. */
export const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' https: data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** Sends an HTML page with the headers every account page carries. */
export function sendPage(reply: FastifyReply, status: number, title: string, body: string): FastifyReply {
  return reply
    .code(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('content-security-policy', PAGE_CSP)
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'same-origin')
    .send(page(title, body));
}

/** A person's browser (it asks for HTML) rather than an API client (JSON, or anything). */
export function wantsHtml(req: FastifyRequest): boolean {
  return /\btext\/html\b/.test(String(req.headers.accept ?? ''));
}

const REPO_SEGMENT = /^\/([a-z0-9][a-z0-9._-]{0,99})(\/|$)/;

/**
 * Addresses in an (escaped) message become links: a person clicks where the message says to go. Only the unknown-host
 * message's, which the server writes: a path echoed in another message could carry a crafted link to elsewhere.
 */
function linkify(escaped: string): string {
  return escaped.replace(/https?:\/\/[^\s<>"']+[^\s<>"'.,;:)]/g, (url) => `<a href="${url}">${url}</a>`);
}

/** SPEC 3's error as a page: what went wrong, the code and request id to quote, and the way to the account page. */
export function sendErrorPage(req: FastifyRequest, reply: FastifyReply, status: number, code: string, message: string, repo = REPO_SEGMENT.exec(req.url)?.[1] ?? null): FastifyReply {
  // On a host that is no org's (unknown, or a bad org name: no req.org), the account page is not there either.
  const onOrgHost = code !== 'unknown_host' && Boolean((req as { org?: string }).org);
  const account = repo && !repo.startsWith('_') && onOrgHost ? `<p><a class="button" href="/${escapeHtml(repo)}/_account/">Your account</a></p>` : '';
  const text = code === 'invalid_name' ? nameRuleInWords(message) : message; // a person reads words, not a pattern
  const body = `<h1>${escapeHtml(status)} — ${escapeHtml(code.replaceAll('_', ' '))}</h1>
<div class="card error"><p>${code === 'unknown_host' ? linkify(escapeHtml(text)) : escapeHtml(text)}</p></div>
${account}<p class="muted">Error <code>${escapeHtml(code)}</code> · request <code>${escapeHtml(req.id)}</code></p>`;
  return sendPage(reply, status, `${status} ${code.replaceAll('_', ' ')}`, body);
}
