// TRUSTED_PROXIES as a check on a peer address: the proxy keeps such a peer's x-forwarded-* (SPEC 8), and the
// connection cap holds it only to the total (connection-cap.ts).
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
