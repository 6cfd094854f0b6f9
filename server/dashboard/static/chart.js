// Charts drawn as SVG in the page: points, step lines and a band on top for points without a
// value (failed measurements). Latencies span orders of magnitude, so y can be logarithmic.

import { svg } from "./dom.js";

const WIDTH = 640;
const HEIGHT = 260;
const PAD = { left: 70, right: 16, top: 26, bottom: 40 };
const BAND = 12; // the band above the plot where points without a value sit

function linearTicks(lo, hi, count) {
  const step0 = (hi - lo) / count || 1;
  const magnitude = 10 ** Math.floor(Math.log10(step0));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= step0);
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(t);
  return ticks;
}

function logTicks(lo, hi) {
  const ticks = [];
  for (let e = Math.ceil(Math.log10(lo)); e <= Math.floor(Math.log10(hi)); e++) ticks.push(10 ** e);
  return ticks.length >= 2 ? ticks : [lo, Math.sqrt(lo * hi), hi];
}

function domain(values, log) {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo === hi) [lo, hi] = log ? [lo / 2, hi * 2] : [lo - 1, hi + 1];
  if (log) return [lo / 1.2, hi * 1.2];
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
}

function scale([lo, hi], [from, to], log) {
  const f = log ? Math.log10 : (v) => v;
  return (v) => from + ((f(v) - f(lo)) / (f(hi) - f(lo))) * (to - from);
}

function stepPath(points, x, y) {
  return points
    .map((p, i) => {
      const xy = `${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`;
      return i === 0 ? `M${xy}` : `H${x(p.x).toFixed(1)}V${y(p.y).toFixed(1)}`;
    })
    .join("");
}

function marker(shape, cx, cy, cls, title) {
  const tip = svg("title", {}, title);
  if (shape === "cross") {
    const d = `M${cx - 4},${cy - 4}L${cx + 4},${cy + 4}M${cx - 4},${cy + 4}L${cx + 4},${cy - 4}`;
    return svg("path", { d, class: cls }, tip);
  }
  return svg("circle", { cx: cx.toFixed(1), cy: cy.toFixed(1), r: 3.5, class: cls }, tip);
}

/**
 * A chart of `series`: [{cls, points: [{x, y, cls, title}], step}], each point a circle, or a
 * cross in the band above the plot when its y is null. `x` and `y` are axes: {label, format,
 * log, zero, integer}; `name` goes to the chart's data-chart attribute.
 */
export function chart({ name, x, y, series, empty }) {
  const root = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "chart",
    role: "img",
    "aria-label": name,
    dataset: { chart: name },
  });
  const all = series.flatMap((s) => s.points);
  const valued = all.filter((p) => p.y !== null);
  if (!all.length) {
    root.append(svg("text", { x: WIDTH / 2, y: HEIGHT / 2, class: "empty" }, empty));
    return root;
  }
  const xs = all.map((p) => p.x).concat(x.zero ? [0] : []);
  const xDomain = domain(xs, false);
  const yDomain = valued.length ? domain(valued.map((p) => p.y), y.log) : [1e-6, 1];
  const left = PAD.left;
  const right = WIDTH - PAD.right;
  const top = PAD.top + BAND;
  const bottom = HEIGHT - PAD.bottom;
  const sx = scale(xDomain, [left, right], false);
  const sy = scale(yDomain, [bottom, top], y.log);

  const axes = svg("g", { class: "axes" });
  axes.append(svg("path", { d: `M${left},${top}V${bottom}H${right}` }));
  for (const t of linearTicks(...xDomain, 6)) {
    if (t < xDomain[0] || t > xDomain[1] || (x.integer && !Number.isInteger(t))) continue;
    axes.append(
      svg("line", { x1: sx(t), x2: sx(t), y1: bottom, y2: bottom + 4 }),
      svg("text", { x: sx(t), y: bottom + 16, class: "tick x" }, x.format(t)),
    );
  }
  if (valued.length) {
    const ticks = y.log ? logTicks(...yDomain) : linearTicks(...yDomain, 4);
    for (const t of ticks) {
      axes.append(
        svg("line", { x1: left, x2: right, y1: sy(t), y2: sy(t), class: "grid" }),
        svg("text", { x: left - 6, y: sy(t) + 4, class: "tick y" }, y.format(t)),
      );
    }
  }
  axes.append(
    svg("text", { x: (left + right) / 2, y: HEIGHT - 6, class: "label" }, x.label),
    svg("text", { x: 12, y: PAD.top - 12, class: "label y" }, y.label),
  );
  root.append(axes);

  for (const s of series) {
    const group = svg("g", { class: `series ${s.cls}` });
    const points = s.points.filter((p) => p.y !== null);
    if (s.step && points.length) {
      const last = { x: xDomain[1], y: points[points.length - 1].y };
      group.append(svg("path", { d: stepPath([...points, last], sx, sy), class: "line" }));
    }
    for (const p of s.points) {
      const [shape, cy] = p.y === null ? ["cross", PAD.top + BAND / 2] : ["circle", sy(p.y)];
      group.append(marker(shape, sx(p.x), cy, p.cls || "point", p.title));
    }
    root.append(group);
  }
  return root;
}
