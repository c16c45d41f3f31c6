// When a refused call is tried again (docs/client.md, "Retries").

/**
 * How long to wait before trying a refused call again: the 429/503's Retry-After plus up to half of it again at random
 * (at most 60 s in all), so that clients refused together do not all come back in the same instant; null when the
 * server did not invite a retry.
 */
export function retryDelayMs(status: number, header: string | undefined): number | null {
  if ((status !== 429 && status !== 503) || header === undefined) return null;
  const seconds = /^\d+$/.test(header.trim()) ? Number(header) : (Date.parse(header) - Date.now()) / 1000;
  if (!Number.isFinite(seconds)) return null;
  const ms = Math.max(seconds, 0) * 1000;
  return Math.min(60_000, ms * (1 + Math.random() / 2));
}
