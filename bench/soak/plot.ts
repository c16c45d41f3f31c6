// A dependency-free SVG line chart: one line per series, x in seconds, y from 0 to the largest value.
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];

export function svgLines(title: string, series: { name: string; points: [number, number][] }[]): string {
  const [w, h, left, top, right, bottom] = [760, 360, 50, 30, 170, 30];
  const all = series.flatMap((s) => s.points);
  const maxX = Math.max(1, ...all.map((p) => p[0]));
  const maxY = Math.max(1, ...all.map((p) => p[1]));
  const x = (v: number) => left + (v / maxX) * (w - left - right);
  const y = (v: number) => h - bottom - (v / maxY) * (h - top - bottom);
  const lines = series.map((s, i) => `<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.5" points="${s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' ')}"/>`
    + `<text x="${w - right + 10}" y="${top + 14 * i + 10}" font-size="11" fill="${COLORS[i % COLORS.length]}">${s.name}</text>`);
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => `<text x="${left - 6}" y="${y(maxY * f) + 4}" font-size="10" text-anchor="end">${(maxY * f).toFixed(0)}</text><text x="${x(maxX * f)}" y="${h - bottom + 14}" font-size="10" text-anchor="middle">${(maxX * f).toFixed(0)} s</text>`);
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>`
    + `<text x="${left}" y="18" font-size="13">${title}</text><line x1="${left}" y1="${h - bottom}" x2="${w - right}" y2="${h - bottom}" stroke="#999"/><line x1="${left}" y1="${top}" x2="${left}" y2="${h - bottom}" stroke="#999"/>`
    + ticks.join('') + lines.join('') + '</svg>\n';
}
