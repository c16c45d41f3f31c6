// What an executor operation answers: an HTTP status and a JSON text (success or SPEC 3 error shape).
import { ApiError, statusOf } from '../../shared/errors.ts';
import { mapSqliteError, type ExecError } from '../sqlite-errors.ts';

export interface Reply {
  status: number;
  body: string;
  /** The database's new version when this request changed it. */
  version?: number;
}

export function errorReply(err: ExecError): Reply {
  const error: Record<string, unknown> = { code: err.code, message: err.message };
  if (err.details) error.details = err.details;
  return { status: statusOf(err.code), body: JSON.stringify({ error }) };
}

/** Turns anything a statement threw into a reply, naming the failing statement's index when there is one. */
export function failure(e: unknown, denied: ExecError | null, statement?: number, extra?: Record<string, unknown>): Reply {
  const err: ExecError = e instanceof ApiError
    ? { code: e.code, message: e.message, details: e.details }
    : mapSqliteError(e, denied);
  if (statement !== undefined || extra) err.details = { ...(statement === undefined ? {} : { statement }), ...err.details, ...extra };
  return errorReply(err);
}
