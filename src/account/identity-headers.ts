// The x-auth-user-* headers (verify responses and app requests). Header values must be visible ASCII.

/**
 * Printable ASCII without '%' stays as is; anything else (a name like "José", a '%') is sent percent-encoded UTF-8.
 * Encoding every '%' keeps it unambiguous: decodeURIComponent of any value gives back exactly the original. So is a
 * value with a space at either end: HTTP drops those, and " admin" would reach the app as "admin".
 */
export function headerValue(value: string): string {
  return /^[\x20-\x24\x26-\x7e]*$/.test(value) && !value.startsWith(' ') && !value.endsWith(' ') ? value : encodeURIComponent(value);
}

export const IDENTITY_HEADERS = ['x-auth-user-id', 'x-auth-user-email', 'x-auth-user-name', 'x-auth-user-login'] as const;

/** The x-auth-user-* headers of a user: GET /verify's and the proxy's to apps alike. */
export function identityHeaders(user: { id: string; email: string | null; name: string | null; login: string | null }): Record<string, string> {
  const h: Record<string, string> = { 'x-auth-user-id': headerValue(user.id) };
  if (user.email) h['x-auth-user-email'] = headerValue(user.email);
  if (user.name) h['x-auth-user-name'] = headerValue(user.name);
  if (user.login) h['x-auth-user-login'] = headerValue(user.login);
  return h;
}
