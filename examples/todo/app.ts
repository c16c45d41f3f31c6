// The todo example: a plain node:http app behind scopebase's proxy (APPS, requireSession). The proxy signs people
// in and passes who they are as x-auth-user-* headers; the app keeps each user's todos in the repo's database
// through the client, and reads the user's "todo/webhook" plugin credential (saved on the account page) as the runtime.
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
// Inside this repository the client is imported from source; an app of your own does `from 'scopebase/client'`.
import { createClient } from '../../src/client/index.ts';

export interface TodoAppOptions {
  /** Where scopebase listens, e.g. http://127.0.0.1:8080 */
  serverUrl: string;
  org: string;
  repo: string;
  /** BASE_DOMAIN: the org host is {org}.{baseDomain}. */
  baseDomain: string;
  /** The repo's secret (`npx scopebase secret acme/todo`). */
  secret: string;
}

const MIGRATIONS = [{ id: '0001_todos', sql: 'CREATE TABLE todos (id INTEGER PRIMARY KEY, user_id TEXT NOT NULL, title TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)' }];

/** The account page stores what was typed: an object `{"url": …}`, that object as JSON text, or a bare URL. */
function webhookUrl(value: unknown): URL | null {
  let v = value;
  if (typeof v === 'string' && v.trim().startsWith('{')) v = JSON.parse(v);
  const raw = typeof v === 'object' && v !== null ? (v as { url?: unknown }).url : v;
  return typeof raw === 'string' && URL.canParse(raw) && /^https?:$/.test(new URL(raw).protocol) ? new URL(raw) : null;
}

const escape = (s: unknown) => String(s ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export async function createTodoApp(opts: TodoAppOptions): Promise<Server> {
  const db = createClient({ url: opts.serverUrl, org: opts.org, repo: opts.repo, baseDomain: opts.baseDomain, secret: opts.secret });
  await db.migrate(MIGRATIONS);
  const server = new URL(opts.serverUrl);

  /** The user's webhook from their account page: the runtime reads credentials with the repo's secret and ?user=. */
  function webhookOf(user: string): Promise<URL | null> {
    const path = `/${opts.repo}/_account/credentials/todo/webhook?user=${encodeURIComponent(user)}`;
    const headers = { host: `${opts.org}.${opts.baseDomain}:${server.port}`, authorization: `Bearer ${opts.secret}` };
    return new Promise((resolve, reject) => {
      request({ host: server.hostname, port: server.port, path, headers }, async (res) => {
        let text = '';
        for await (const chunk of res) text += chunk;
        if (res.statusCode !== 200) return resolve(null);
        try {
          resolve(webhookUrl((JSON.parse(text) as { value?: unknown }).value));
        } catch {
          resolve(null); // a value that is not the JSON we expect: no webhook
        }
      }).on('error', reject).end();
    });
  }

  async function page(req: IncomingMessage, res: ServerResponse, user: string) {
    const prefix = String(req.headers['x-forwarded-prefix'] ?? '');
    const { rows } = await db.query<{ title: string; created_at: string }>('SELECT title, created_at FROM todos WHERE user_id = ? ORDER BY id', [user]);
    const webhook = await webhookOf(user).catch(() => null);
    // x-auth-user-* values are percent-encoded when not plain ASCII (docs/accounts.md): decoded, "Zoë" shows as Zoë.
    const name = decodeURIComponent(String(req.headers['x-auth-user-name'] ?? req.headers['x-auth-user-email'] ?? user));
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }).end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Todos</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:3rem auto;padding:0 1rem}li{margin:.25rem 0}</style></head>
<body><h1>${escape(name)}'s todos</h1>
<ul>${rows.map((r) => `<li>${escape(r.title)}</li>`).join('') || '<li><em>nothing yet</em></li>'}</ul>
<form method="post" action="${escape(prefix)}/add"><label>New todo <input name="title" required maxlength="200"></label> <button>Add</button></form>
<p>Webhook: ${webhook ? `notifying <code>${escape(webhook.host)}</code> on each new todo (change it on` : `none — save a credential with plugin <code>todo</code>, name <code>webhook</code> and value <code>{"url": "https://…"}</code> on`}
<a href="${escape(prefix)}/_account/">your account page</a>${webhook ? ')' : ''}.</p>
</body></html>`);
  }

  async function add(req: IncomingMessage, res: ServerResponse, user: string) {
    let body = '';
    for await (const chunk of req) body += chunk;
    const title = (new URLSearchParams(body).get('title') ?? '').trim().slice(0, 200);
    if (title) {
      await db.execute('INSERT INTO todos (user_id, title) VALUES (?, ?)', [user, title]);
      const webhook = await webhookOf(user).catch(() => null);
      if (webhook) void fetch(webhook, { method: 'POST', body: JSON.stringify({ title }), headers: { 'content-type': 'application/json' } }).catch(() => {});
    }
    res.writeHead(303, { location: `${String(req.headers['x-forwarded-prefix'] ?? '')}/` }).end();
  }

  return createServer((req, res) => {
    // requireSession: the proxy lets no anonymous request through, and drops any x-auth-user-* a client sent.
    const user = req.headers['x-auth-user-id'];
    const handle = typeof user !== 'string' ? null : req.method === 'POST' && req.url === '/add' ? add : req.method === 'GET' && req.url === '/' ? page : null;
    if (!handle) return void res.writeHead(typeof user !== 'string' ? 401 : 404, { 'content-type': 'text/plain' }).end(typeof user !== 'string' ? 'sign in first\n' : 'not found\n');
    handle(req, res, user as string).catch((err: Error) => {
      console.error('todo app:', err.message);
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'text/plain' }).end('the database did not answer; try again\n');
    });
  });
}
