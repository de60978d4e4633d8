// Colour for the heatmaps: viridis (dark purple = low, yellow = high; it
// reads in grey print and to colour-blind eyes), on a linear or log scale
// over the values in view, grey where a cell has no value.
const STOPS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"]
  .map((h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)));
export const NO_VALUE = [208, 212, 217];  // #d0d4d9

// 256 entries of [r, g, b].
const TABLE = Array.from({ length: 256 }, (_, i) => {
  const x = (i / 255) * (STOPS.length - 1), k = Math.min(STOPS.length - 2, Math.floor(x)), f = x - k;
  return STOPS[k].map((c, j) => Math.round(c + f * (STOPS[k + 1][j] - c)));
});

// The scale over the finite values of `cells` (a Float32Array, NaN = none):
// { lo, hi, log, at(v) -> [r, g, b] }. On a log scale only positive values
// count and a value <= 0 takes the lowest colour.
export function colourScale(cells, log) {
  let lo = Infinity, hi = -Infinity;
  for (const v of cells) {
    if (!Number.isFinite(v) || (log && v <= 0)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo === Infinity) { lo = 0; hi = 1; log = false; }
  const f = log ? Math.log10 : (v) => v;
  const a = f(lo), span = f(hi) - a;
  const at = (v) => {
    if (!Number.isFinite(v)) return NO_VALUE;
    if (log && v <= 0) return TABLE[0];
    const t = span > 0 ? (f(v) - a) / span : 0.5;
    return TABLE[Math.max(0, Math.min(255, Math.round(t * 255)))];
  };
  return { lo, hi, log, at };
}

// A number for a tooltip or a legend: 4 significant digits, exponent beyond.
export function formatValue(v) {
  if (v === null || v === undefined || !Number.isFinite(v)) return "no value";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return Number(v.toPrecision(4)).toString();
}

// The legend: the colour bar from low to high with its two ends, the unit,
// what a colour means, and the grey of a missing value.
export function legend(scale, { unit, reduce }) {
  const box = document.createElement("div");
  box.className = "heatmap-legend";
  const bar = document.createElement("canvas");
  bar.width = 160; bar.height = 10;
  const ctx = bar.getContext("2d");
  for (let x = 0; x < 160; x++) {
    const [r, g, b] = TABLE[Math.round((x / 159) * 255)];
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(x, 0, 1, 10);
  }
  const u = unit ? ` ${unit}` : "";
  const swatch = Object.assign(document.createElement("span"), { className: "no-value", title: "no value stored" });
  box.append(`${formatValue(scale.lo)}${u}`, bar, `${formatValue(scale.hi)}${u}`,
             ` · ${scale.log ? "log" : "linear"} scale · colour = ${REDUCED[reduce] ?? reduce} in the column's steps · `,
             swatch, " no value");
  return box;
}

export const REDUCED = { max: "largest value", min: "smallest value", mean: "mean", last: "last value" };
