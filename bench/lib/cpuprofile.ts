// Summarizes a V8 .cpuprofile: self time per function and time per package, as a percentage of samples.
import { readFileSync } from 'node:fs';

interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: number[] }

const where = (url: string) => url.replace(/.*node_modules\//, 'nm/').replace(/.*\/src\//, 'src/');
const pkgOf = (url: string) => (url.includes('node_modules/') ? url.replace(/.*node_modules\/(@[^/]+\/[^/]+|[^/]+).*/, '$1')
  : url.includes('/src/') ? url.replace(/.*\/(src\/[^/]+).*/, '$1') : url ? `node:${url.replace(/^node:/, '').split('/')[0]}` : '(native)');

export function summarize(path: string, top: number): string {
  const prof = JSON.parse(readFileSync(path, 'utf8')) as { nodes: Node[]; samples: number[]; timeDeltas: number[] };
  const byId = new Map(prof.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of prof.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<string, number>();
  const packages = new Map<string, number>();
  let total = 0;
  prof.samples.forEach((id, i) => {
    const t = prof.timeDeltas[i] ?? 0;
    total += t;
    const cf = byId.get(id)!.callFrame;
    const key = `${cf.functionName || '(anonymous)'} ${where(cf.url)}:${cf.lineNumber}`;
    self.set(key, (self.get(key) ?? 0) + t);
    const seen = new Set<string>();
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const pkg = pkgOf(byId.get(cur)!.callFrame.url);
      if (!seen.has(pkg)) {
        seen.add(pkg);
        packages.set(pkg, (packages.get(pkg) ?? 0) + t);
      }
    }
  });
  const pct = (t: number) => `${((t / total) * 100).toFixed(1).padStart(5)}%`;
  const rows = (m: Map<string, number>, n: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, t]) => `${pct(t)}  ${k}`).join('\n');
  return `self time:\n${rows(self, top)}\nby package (inclusive):\n${rows(packages, 12)}`;
}
