// A folder of NNNN_name.sql files (the layout of drizzle-kit and wrangler) as a migration list, in file-name order
// (SPEC 4.6), with every entry it will not use and why.

export interface Migration { id: string; sql: string }
export interface SkippedFile { file: string; reason: string }
export interface MigrationFolder { dir: string; migrations: (Migration & { file: string })[]; skipped: SkippedFile[] }

const FILE = /^\d+_.+\.sql$/;

/** The folder's numbers have different widths, so file-name order is not number order (`10_b` before `9_a`). */
export class MigrationOrderError extends Error {}
const ID = /^[A-Za-z0-9._-]{1,128}$/;

function whyNot(name: string, isFile: boolean): string | null {
  if (!isFile) return 'not a file (migrations are the .sql files directly in the folder)';
  if (name.startsWith('.')) return 'a hidden file';
  if (!name.toLowerCase().endsWith('.sql')) return 'not a .sql file';
  if (!name.endsWith('.sql')) return 'the extension must be lowercase .sql';
  if (!FILE.test(name)) return 'the name does not start with digits and an underscore (NNNN_name.sql)';
  // golang-migrate's layout: applied in file-name order, `x.down.sql` would run before `x.up.sql` and undo earlier work.
  if (/\.down\.sql$/.test(name)) return 'a down migration (it undoes its .up.sql; migrate only applies)';
  if (!ID.test(name.slice(0, -4))) return 'its id (the name without .sql) may hold only letters, digits, ".", "_" and "-", at most 128';
  return null;
}

/** Reads `dir` (Node only). Throws when the folder cannot be read; an empty result is the caller's to judge. */
export async function readMigrationFolder(dir: string): Promise<MigrationFolder> {
  const { readdir, readFile } = await import('node:fs/promises');
  const { join } = await import('node:path');
  const entries = await readdir(dir, { withFileTypes: true });
  const migrations: MigrationFolder['migrations'] = [];
  const skipped: SkippedFile[] = [];
  for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    const reason = whyNot(entry.name, entry.isFile() || entry.isSymbolicLink());
    if (reason) skipped.push({ file: entry.name, reason });
    else migrations.push({ file: entry.name, id: entry.name.slice(0, -4), sql: upPart(await readFile(join(dir, entry.name), 'utf8')) });
  }
  for (let i = 1; i < migrations.length; i++) {
    const [a, b] = [migrations[i - 1]!.file, migrations[i]!.file];
    if (number(a) > number(b)) {
      throw new MigrationOrderError(`${a} and ${b} are numbered with different widths, so file-name order would apply ${a} first: give every file the same number of digits (e.g. ${b.replace(/^\d+/, (n) => n.padStart(a.indexOf('_'), '0'))})`);
    }
  }
  return { dir, migrations, skipped };
}

const number = (file: string): bigint => BigInt(file.slice(0, file.indexOf('_')));

/**
 * dbmate's layout keeps both directions in one file, after `-- migrate:up` and `-- migrate:down` lines: sent whole, a
 * migration would create its table and drop it again at once. Only its up part is the migration.
 */
function upPart(sql: string): string {
  const down = /^--\s*migrate:down\b.*$/m.exec(sql);
  return down ? sql.slice(0, down.index) : sql;
}
