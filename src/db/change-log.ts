// The service's reads of a database's change log: mirror delivery's pages (ChangeFeed) and a cluster primary's shipments.
import { ApiError } from '../shared/errors.ts';
import type { ChangeEvent, Scope } from './contract.ts';
import type { ExecutorPool } from './executor/pool.ts';
import type { Layout } from './layout.ts';
import { MAX_CHANGES_PAGE } from './request.ts';
import { notFound } from './pipeline-backend.ts';

/** What of the service the change-log reads need. */
export interface ChangeLogParts {
  pool: ExecutorPool;
  layout: Layout;
  exists(scope: Scope): boolean;
}

export class ChangeLog {
  private readonly pool: ExecutorPool;
  private readonly layout: Layout;
  private readonly exists: (scope: Scope) => boolean;

  constructor(parts: ChangeLogParts) {
    this.pool = parts.pool;
    this.layout = parts.layout;
    this.exists = parts.exists;
  }

  async readChanges(scope: Scope, since: number, limit: number): Promise<{ events: ChangeEvent[]; version: number }> {
    if (!this.exists(scope)) throw notFound(scope);
    const res = await this.pool.read({ op: 'changes', path: this.layout.path(scope), since, limit: Math.min(limit, MAX_CHANGES_PAGE) });
    const parsed = JSON.parse(res.body.toString('utf8'));
    if (res.status !== 200) throw new ApiError(parsed.error.code, parsed.error.message, parsed.error.details);
    return parsed;
  }

  /**
   * A cluster primary's next shipment after `since`: the text `{"events": [...]}` of the events up to the first without
   * a changeset (null when that is the next one), made by the executor and sent on as it is: this event loop never
   * parses a page of the tenant's changes. Throws as readChanges.
   */
  readShipment(scope: Scope, since: number, limit: number): Promise<Buffer | null> {
    return this.changesText(scope, since, limit, { shipment: true });
  }

  /**
   * Mirror delivery's page of the change log when its thread should not read it itself: the text
   * `{"events": [...], "version": N, "schema": {"bytes": B, "cookie": C}}` made by the executor (the read parses the
   * tenant's schema, whose size the tenant picks) and passed on unparsed. Throws as readChanges.
   */
  async readChangePage(scope: Scope, since: number, limit: number): Promise<Buffer> {
    return (await this.changesText(scope, since, limit, { schema: true }))!; // only a shipment is ever empty (204)
  }

  /** A change-log page as the executor's text, passed on unparsed; 204 (a shipment's "nothing to ship") is null. */
  private async changesText(scope: Scope, since: number, limit: number, option: { shipment: true } | { schema: true }): Promise<Buffer | null> {
    if (!this.exists(scope)) throw notFound(scope);
    const res = await this.pool.read({ op: 'changes', path: this.layout.path(scope), since, limit: Math.min(limit, MAX_CHANGES_PAGE), ...option });
    if (res.status === 204) return null;
    if (res.status === 200) return res.body;
    const { error } = JSON.parse(res.body.toString('utf8'));
    throw new ApiError(error.code, error.message, error.details);
  }

  async currentVersion(scope: Scope): Promise<number | null> {
    if (!this.exists(scope)) return null;
    const res = await this.readChanges(scope, Number.MAX_SAFE_INTEGER, 1);
    return res.version;
  }
}
