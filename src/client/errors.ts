// SPEC 3: every error reply is {"error": {"code", "message", "details"?}}; each code is its own exception class.

export type ErrorCode =
  | 'invalid_request' | 'invalid_name' | 'sql_error' | 'read_only' | 'not_allowed' | 'unauthorized' | 'unauthenticated'
  | 'forbidden' | 'database_not_found' | 'not_found' | 'unknown_host' | 'constraint_violation' | 'migration_conflict'
  | 'gone' | 'payload_too_large' | 'result_too_large' | 'query_timeout' | 'rate_limited' | 'unavailable'
  | 'quota_exceeded' | 'internal';

/** An error reply from the server (or `network`/`timeout`/`aborted` when no reply came). */
export class ScopebaseError extends Error {
  /** HTTP status, 0 when no reply came. */
  readonly status: number;
  readonly code: string;
  readonly details: Record<string, unknown> | undefined;
  /** The reply's x-request-id, to quote when asking an operator. */
  readonly requestId: string | undefined;
  constructor(status: number, code: string, message: string, details?: Record<string, unknown>, requestId?: string) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.details = details;
    this.requestId = requestId;
  }
}

export class InvalidRequestError extends ScopebaseError {}
export class InvalidNameError extends ScopebaseError {}
export class SqlError extends ScopebaseError {}
export class ReadOnlyError extends ScopebaseError {}
export class NotAllowedError extends ScopebaseError {}
export class UnauthorizedError extends ScopebaseError {}
export class ForbiddenError extends ScopebaseError {}
export class DatabaseNotFoundError extends ScopebaseError {}
export class NotFoundError extends ScopebaseError {}
export class ConstraintViolationError extends ScopebaseError {}
export class MigrationConflictError extends ScopebaseError {}
export class GoneError extends ScopebaseError {}
export class PayloadTooLargeError extends ScopebaseError {}
export class QueryTimeoutError extends ScopebaseError {}
export class RateLimitedError extends ScopebaseError {}
export class UnavailableError extends ScopebaseError {}
export class QuotaExceededError extends ScopebaseError {}
export class InternalError extends ScopebaseError {}
/** No reply: the server could not be reached, or the connection broke (`details.sent` says whether the request went out). */
export class NetworkError extends ScopebaseError {}
/** The client's own time limit passed (`timeoutMs`). */
export class TimeoutError extends ScopebaseError {}
/** The caller's AbortSignal fired. */
export class AbortError extends ScopebaseError {}

const CLASSES: Record<string, typeof ScopebaseError> = {
  invalid_request: InvalidRequestError, invalid_name: InvalidNameError, sql_error: SqlError, read_only: ReadOnlyError,
  not_allowed: NotAllowedError, unauthorized: UnauthorizedError, unauthenticated: UnauthorizedError, forbidden: ForbiddenError,
  database_not_found: DatabaseNotFoundError, not_found: NotFoundError, unknown_host: NotFoundError,
  constraint_violation: ConstraintViolationError, migration_conflict: MigrationConflictError, gone: GoneError,
  payload_too_large: PayloadTooLargeError, result_too_large: PayloadTooLargeError, query_timeout: QueryTimeoutError,
  rate_limited: RateLimitedError, unavailable: UnavailableError, quota_exceeded: QuotaExceededError, internal: InternalError,
  network: NetworkError, timeout: TimeoutError, aborted: AbortError,
};

/** The exception for an error code (an unknown code gets the base class). */
export function errorFor(status: number, code: string, message: string, details?: Record<string, unknown>, requestId?: string): ScopebaseError {
  const Class = CLASSES[code] ?? ScopebaseError;
  return new Class(status, code, message, details, requestId);
}
