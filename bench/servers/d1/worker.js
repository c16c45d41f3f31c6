// The peer: a Worker doing the same point read and insert as bench/servers/simple-sqlite.ts, against a D1 binding.
// POST /read {"id"} -> {columns, rows}; POST /insert {"title"}; POST /exec {"sql"} (schema and seeding).
export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (request.method !== 'POST') return Response.json({ ok: true });
    const input = await request.json();
    try {
      if (pathname === '/read') {
        const [columns, ...rows] = await env.DB.prepare('SELECT id, title, done FROM todos WHERE id = ?').bind(input.id).raw({ columnNames: true });
        return Response.json({ columns, rows });
      }
      if (pathname === '/insert') {
        const r = await env.DB.prepare('INSERT INTO todos (title, done) VALUES (?, 0)').bind(input.title).run();
        return Response.json({ rowsAffected: r.meta.changes, lastInsertRowid: r.meta.last_row_id });
      }
      if (pathname === '/exec') {
        const r = await env.DB.prepare(input.sql).run();
        return Response.json({ rowsAffected: r.meta.changes });
      }
    } catch (e) {
      return Response.json({ error: { code: 'sql_error', message: String(e && e.message) } }, { status: 400 });
    }
    return Response.json({ error: { code: 'not_found', message: 'POST /read, /insert or /exec' } }, { status: 404 });
  },
};
