// SPEC 7: return_to must be a path on the same host; anything else falls back to /{repo}/.

/**
 * Returns `raw` when it is a plain same-host path, else `/{repo}/`; percent-encoded as a URL is, so it is always
 * a valid Location header (a raw `ā`, U+2028 or emoji would make Node refuse to send the redirect at all).
 */
export function safeReturnTo(raw: unknown, repo: string): string {
  const fallback = `/${repo}/`;
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > 2048) return fallback;
  // Browsers treat `\` as `/`, and strip tabs/newlines inside URLs: refuse them so `/\evil` or `/\t/evil` cannot become `//evil`.
  if (!raw.startsWith('/') || raw.startsWith('//') || /[\\]/.test(raw) || [...raw].some((c) => c.charCodeAt(0) < 0x20 || c.charCodeAt(0) === 0x7f)) return fallback;
  try {
    // Resolving against a dummy origin must keep that origin: no scheme or authority slipped through.
    const u = new URL(raw, 'http://same.invalid');
    if (u.origin !== 'http://same.invalid') return fallback;
    // Dot segments are resolved by the parse: `/.//evil` or `/a/..//evil` come out as `//evil`, another host.
    const path = u.pathname + u.search + u.hash;
    return path.startsWith('//') ? fallback : path;
  } catch {
    return fallback;
  }
}
