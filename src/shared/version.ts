// The package's version, as package.json says (the CLI's --version and the OpenAPI document's info.version).
import { readFileSync } from 'node:fs';

export function productVersion(): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}
