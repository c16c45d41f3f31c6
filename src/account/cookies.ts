// SPEC 7 cookies: `__Host-session` under HTTPS, `session` on plain HTTP; host-only, Path=/, HttpOnly, SameSite=Lax.

export const SESSION_COOKIE = { https: '__Host-session', http: 'session' } as const;
/** Binds a pending sign-in to the browser that started it (login CSRF); short-lived. */
export const LOGIN_COOKIE = { https: '__Host-scopebase-login', http: 'scopebase-login' } as const;

export function cookieName(names: { https: string; http: string }, https: boolean): string {
  return https ? names.https : names.http;
}

/** Reads one cookie from a Cookie header; the first occurrence wins, as browsers send the most specific first. */
export function readCookie(header: string | string[] | undefined, name: string): string | null {
  if (header === undefined) return null;
  const text = Array.isArray(header) ? header.join('; ') : header;
  for (const part of text.split(';')) {
    const eq = part.indexOf('=');
    if (eq === -1) continue;
    if (part.slice(0, eq).trim() !== name) continue;
    let value = part.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) value = value.slice(1, -1);
    return value;
  }
  return null;
}

/** Removes the named cookies from a Cookie header (so an app never sees the session token); undefined when none is left. */
export function withoutCookies(header: string | string[] | undefined, names: string[]): string | undefined {
  if (header === undefined) return undefined;
  const text = Array.isArray(header) ? header.join('; ') : header;
  const kept = text.split(';').map((p) => p.trim()).filter((p) => p && !names.includes(p.split('=')[0]!.trim()));
  return kept.length ? kept.join('; ') : undefined;
}

export function serializeCookie(name: string, value: string, maxAgeSeconds: number, https: boolean): string {
  const parts = [`${name}=${value}`, 'Path=/', `Max-Age=${Math.max(0, Math.floor(maxAgeSeconds))}`, 'HttpOnly', 'SameSite=Lax'];
  if (https) parts.push('Secure');
  return parts.join('; ');
}

export function clearCookie(name: string, https: boolean): string {
  return serializeCookie(name, '', 0, https);
}
