// SPEC 2: the org is the label directly below BASE_DOMAIN in Host; anything else is unknown_host.
import { isIPv6 } from 'node:net';
import { ApiError } from './errors.ts';
import { checkOrg, lowerAscii, quote } from './names.ts';

/** Characters that end or split an authority in a URL: a Host holding one would be read as another host downstream. */
const DELIMITERS = /[\s/?#\\[]/;

/**
 * Splits Host into name and port as RFC 9110 7.2 allows it (`uri-host [":" port]`): no userinfo, a bracketed IPv6
 * literal or a name, a port of 1–5 digits from 1 to 65535. Anything else is a malformed request (400), never an org.
 */
export function splitHost(host: string): { name: string; port: string | null } {
  const malformed = (why: string) => new ApiError('invalid_request', `Host ${quote(host)} is malformed: ${why}`);
  let name: string;
  let rest: string;
  if (host.startsWith('[')) {
    const close = host.indexOf(']');
    if (close === -1) throw malformed('its IPv6 address has "[" without "]"');
    name = host.slice(0, close + 1);
    rest = host.slice(close + 1);
    if (!isIPv6(name.slice(1, -1))) throw malformed('the part in brackets is not an IPv6 address');
    if (rest !== '' && !rest.startsWith(':')) throw malformed('only a port may follow the IPv6 address');
  } else {
    if (host.includes('@')) throw malformed('it has user information ("user@"), which Host never carries');
    if (host.includes(']')) throw malformed('its IPv6 address has "]" without "["');
    const colon = host.indexOf(':');
    name = colon === -1 ? host : host.slice(0, colon);
    rest = colon === -1 ? '' : host.slice(colon);
    if (name === '') throw malformed('it has no host name');
    if (DELIMITERS.test(name)) throw malformed('it holds a character no host name has');
  }
  if (rest === '') return { name, port: null };
  const port = rest.slice(1);
  if (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535) {
    throw malformed(port.includes(':') ? 'an IPv6 address must be in brackets, and only one port may follow the name' : 'its port must be a number from 1 to 65535');
  }
  return { name, port };
}

/** What the unknown_host message shows of a listener: where a person goes next on an org host, and what it is. */
export interface HostExample { path: string; what: string; served: string }

/** The proxy's (and the account service's): each repo's account page. */
const ACCOUNT_PAGE: HostExample = { served: 'each organization has its own host and each repo its path there', path: '/web/_account/', what: 'the account page of repo web in org acme' };

export function orgFromHost(raw: string | undefined, baseDomain: string, example: HostExample = ACCOUNT_PAGE): string {
  if (!raw) throw new ApiError('unknown_host', 'the request has no Host header');
  // Node reads header bytes as Latin-1: a UTF-8 name (never valid here) is shown as the person typed it.
  const host = /[\x80-\xff]/.test(raw) ? Buffer.from(raw, 'latin1').toString('utf8') : raw;
  const { name: given, port } = splitHost(host);
  const name = lowerAscii(given);
  if (name.startsWith('[')) throw new ApiError('unknown_host', `host ${quote(host)} is not an organization host`);
  const suffix = `.${baseDomain}`;
  const label = name.endsWith(suffix) ? name.slice(0, -suffix.length) : '';
  if (label.length === 0 || label.includes('.')) {
    // The address in the start-up banner is where people land first: say where the org hosts are.
    throw new ApiError('unknown_host', `host ${quote(host)} is not {org}.${baseDomain}: ${example.served}, e.g. http://acme.${baseDomain}${port === null ? '' : `:${port}`}${example.path} (${example.what})`);
  }
  return checkOrg(label);
}
