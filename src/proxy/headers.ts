// SPEC 8 header hygiene: headers the services trust can only come from the proxy, never from a client.
import type { IncomingHttpHeaders } from 'node:http';

/** Internal headers the proxy sets for standalone services; a client's copy is always dropped. */
export const INTERNAL_PREFIX = 'x-scopebase-';

export function stripSpoofableHeaders(headers: IncomingHttpHeaders): void {
  for (const name of Object.keys(headers)) {
    if (name.startsWith(INTERNAL_PREFIX) || name.startsWith('x-auth-user-')) delete headers[name];
  }
}
