// SPEC 2: the org is the label directly below BASE_DOMAIN in Host; anything else is unknown_host.
import { ApiError } from './errors.ts';
import { checkOrg, lowerAscii, quote } from './names.ts';

export function orgFromHost(raw: string | undefined, baseDomain: string): string {
  if (!raw) throw new ApiError('unknown_host', 'the request has no Host header');
  // Node reads header bytes as Latin-1: a UTF-8 name (never valid here) is shown as the person typed it.
  const host = /[\x80-\xff]/.test(raw) ? Buffer.from(raw, 'latin1').toString('utf8') : raw;
  let name = lowerAscii(host);
  if (name.startsWith('[')) throw new ApiError('unknown_host', `host ${quote(host)} is not an organization host`);
  const colon = name.lastIndexOf(':');
  if (colon !== -1) {
    if (!/^\d*$/.test(name.slice(colon + 1))) throw new ApiError('unknown_host', `host ${quote(host)} has a malformed port`);
    name = name.slice(0, colon);
  }
  const suffix = `.${baseDomain}`;
  const label = name.endsWith(suffix) ? name.slice(0, -suffix.length) : '';
  if (label.length === 0 || label.includes('.')) {
    // The address in the start-up banner is where people land first: say where the org hosts are.
    const port = colon === -1 ? '' : host.slice(colon);
    throw new ApiError('unknown_host', `host ${quote(host)} is not {org}.${baseDomain}: each organization has its own host and each repo its path there, e.g. http://acme.${baseDomain}${port}/web/_account/ (the account page of repo web in org acme)`);
  }
  return checkOrg(label);
}
