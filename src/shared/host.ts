// SPEC 2: the org is the label directly below BASE_DOMAIN in Host; anything else is unknown_host.
import { ApiError } from './errors.ts';
import { checkOrg, quote } from './names.ts';

export function orgFromHost(host: string | undefined, baseDomain: string): string {
  if (!host) throw new ApiError('unknown_host', 'the request has no Host header');
  let name = host.toLowerCase();
  if (name.startsWith('[')) throw new ApiError('unknown_host', `host ${quote(host)} is not an organization host`);
  const colon = name.lastIndexOf(':');
  if (colon !== -1) {
    if (!/^\d{1,5}$/.test(name.slice(colon + 1))) throw new ApiError('unknown_host', `host ${quote(host)} has a malformed port`);
    name = name.slice(0, colon);
  }
  const suffix = `.${baseDomain}`;
  if (!name.endsWith(suffix)) throw new ApiError('unknown_host', `host ${quote(host)} is not {org}.${baseDomain}`);
  const label = name.slice(0, -suffix.length);
  if (label.length === 0 || label.includes('.')) throw new ApiError('unknown_host', `host ${quote(host)} is not {org}.${baseDomain}`);
  return checkOrg(label);
}
