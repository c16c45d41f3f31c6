// `scopebase migrate <dir>`: sends a folder of NNNN_name.sql files (drizzle-kit / wrangler layout) in file-name order.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { request } from 'undici';
import { loadConfig } from '../shared/config.ts';
import { repoSecret } from '../shared/secrets.ts';

const USAGE = `usage: scopebase migrate <dir> --repo org/repo [--url http://127.0.0.1:8080] [--database main] [--secret S] [--dry-run]
  Reads <dir>/NNNN_name.sql in file-name order; the id of each migration is its file name without .sql.
  Without --secret, the secret is derived from RUNTIME_ROOT_KEY (or the development key in DATA_DIR).\n`;

export async function migrateCommand(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args, allowPositionals: true, options: { repo: { type: 'string' }, url: { type: 'string' }, database: { type: 'string' }, secret: { type: 'string' }, 'dry-run': { type: 'boolean' } } });
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  const [dir] = parsed.positionals;
  const [org, repo] = (parsed.values.repo ?? '').toLowerCase().split('/');
  if (!dir || !org || !repo) {
    process.stderr.write(USAGE);
    return 2;
  }
  const files = readdirSync(dir).filter((f) => /^\d+_.+\.sql$/.test(f)).sort();
  const migrations = files.map((f) => ({ id: f.slice(0, -4), sql: readFileSync(join(dir, f), 'utf8') }));
  process.stderr.write(`read ${migrations.length} migration file(s) from ${dir}\n`);
  const config = loadConfig();
  const secret = parsed.values.secret ?? repoSecret(config.rootKeys[0]!, org, repo);
  const base = parsed.values.url ?? `http://127.0.0.1:${config.port}`;
  const res = await request(`${base.replace(/\/+$/, '')}/${repo}/_db/migrate`, {
    method: 'POST',
    headers: { host: `${org}.${config.baseDomain}:${new URL(base).port || 80}`, authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
    body: JSON.stringify({ migrations, dryRun: parsed.values['dry-run'] === true, ...(parsed.values.database ? { database: parsed.values.database } : {}) }),
  });
  const body = (await res.body.json()) as Record<string, unknown> & { error?: { code: string; message: string } };
  if (res.statusCode !== 200) {
    process.stderr.write(`migrate failed: ${res.statusCode} ${body.error?.code}: ${body.error?.message}\n`);
    return 1;
  }
  const applied = body.applied as string[];
  const verb = body.dryRun ? 'would apply' : 'applied';
  process.stdout.write(`${verb} ${applied.length}: ${applied.join(', ') || '(none)'}; already applied ${(body.alreadyApplied as string[]).length}; version ${body.version}\n`);
  return 0;
}
