// Types of compile-cache.js (plain JavaScript so it runs before the TypeScript stripper loads).
export function compileCacheDir(): string | null;
