// Checks that a verified notification has the SPEC 5 shape before anything is applied.
import type { ChangeEvent } from '../../db/contract.ts';
import { ApiError } from '../../shared/errors.ts';
import { isDatabaseName, isOrgName, isRepoName } from '../../shared/names.ts';

const bad = (why: string) => new ApiError('invalid_request', `not a scopebase change event: ${why}`);
/** SPEC 5, 4.11 and 4.12. */
const TYPES: ReadonlySet<string> = new Set(['database.changed', 'database.migrated', 'database.restored', 'database.imported']);
const isVersion = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

export function parseEvent(value: unknown): ChangeEvent {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw bad('the body must be a JSON object');
  const e = value as Record<string, unknown>;
  if (!TYPES.has(e.type as string)) throw bad(`"type" must be one of ${[...TYPES].join(', ')}`);
  // A restore or an import replaces the whole content: it never travels as a changeset (SPEC 4.11, 4.12).
  if ((e.type === 'database.restored' || e.type === 'database.imported') && e.changeset !== null) throw bad(`a ${e.type as string} event carries no changeset`);
  if (typeof e.id !== 'string' || e.id.length === 0 || e.id.length > 200) throw bad('"id" must be a string');
  if (typeof e.org !== 'string' || !isOrgName(e.org)) throw bad('"org" is not a valid org name');
  if (typeof e.repo !== 'string' || !isRepoName(e.repo)) throw bad('"repo" is not a valid repo name');
  if (typeof e.database !== 'string' || !isDatabaseName(e.database)) throw bad('"database" is not a valid database name');
  if (!isVersion(e.version) || (e.version as number) < 1) throw bad('"version" must be a whole number ≥ 1');
  if (e.previousVersion !== (e.version as number) - 1) throw bad('"previousVersion" must be version - 1');
  if (e.changeset !== null && (typeof e.changeset !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(e.changeset))) throw bad('"changeset" must be base64 or null');
  const changes = e.changes as Record<string, unknown> | undefined;
  if (typeof changes !== 'object' || changes === null || !Array.isArray(changes.tables) || !changes.tables.every((t) => typeof t === 'string')) {
    throw bad('"changes" must be {"rowsAffected", "tables": [...]}');
  }
  if (e.type === 'database.migrated' && !Array.isArray(e.migrations)) throw bad('a database.migrated event carries "migrations"');
  return value as ChangeEvent;
}
