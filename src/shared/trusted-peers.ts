// TRUSTED_PROXIES as a check on a peer address: the proxy keeps such a peer's x-forwarded-* (SPEC 8), and the
// connection cap holds it only to the total (connection-cap.ts); and what a client address is counted by.
import { BlockList, isIP } from 'node:net';

/** Returns a check for "this peer address is a trusted load balancer" (addresses and CIDRs). */
export function trustedPeers(list: string[]): (address: string | undefined) => boolean {
  if (list.length === 0) return () => false;
  const block = new BlockList();
  for (const entry of list) {
    const [addr, bits] = entry.split('/') as [string, string | undefined];
    const family = isIP(addr) === 6 ? 'ipv6' : 'ipv4';
    if (bits === undefined) block.addAddress(addr, family);
    else block.addSubnet(addr, Number(bits), family);
  }
  return (address) => {
    if (!address) return false;
    const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    const a = v4 ? v4[1]! : address;
    return block.check(a, isIP(a) === 6 ? 'ipv6' : 'ipv4');
  };
}

/**
 * What a client is counted by (the connection cap, the body budget's shares, sign-in limits): an IPv4 address, or an
 * IPv6 /64 (one client usually holds a whole /64); with `bits` 48, the IPv6 network a site or a tunnel broker's
 * customer holds (an IPv4 address stays itself).
 */
export function clientKey(address: string | undefined, bits: 64 | 48 = 64): string {
  if (address === undefined) return '';
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  if (!address.includes(':')) return address;
  const [head = '', tail] = address.replace(/%.*$/, '').split('::');
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups.slice(0, bits / 16).map((g) => parseInt(g, 16).toString(16)).join(':')}::/${bits}`;
}
