// A drawn uPlot chart as a file: PNG from its canvas, SVG rebuilt as vectors
// from its data and scales (bands, lines, axes' ticks, legend and any marks),
// so a figure can go into a paper or a post-mortem at any size.

const call = (v, ...args) => (typeof v === "function" ? v(...args) : v);
const esc = (s) => String(s).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);
const fixed = (v) => v.toFixed(1);

export function downloadPng(u, name) {
  const a = document.createElement("a");
  a.href = u.ctx.canvas.toDataURL("image/png");
  a.download = `${name}.png`;
  a.click();
}

export function downloadSvg(u, name, marks = []) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([chartSvg(u, marks)], { type: "image/svg+xml" }));
  a.download = `${name}.svg`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

// Runs of consecutive non-null points of series i as [x, y], in the plot's
// CSS pixels shifted to where the plot sits in the chart; a series that spans
// gaps (uPlot's spanGaps) is one run.
function segments(u, i, at) {
  const out = [];
  let run = [];
  const xs = u.data[0], ys = u.data[i], { scale, spanGaps } = u.series[i];
  for (let j = 0; j < xs.length; j++) {
    if (ys[j] === null || ys[j] === undefined || !Number.isFinite(ys[j])) {
      if (run.length && !spanGaps) out.push(run), (run = []);
      continue;
    }
    run.push([at.left + u.valToPos(xs[j], "x"), at.top + u.valToPos(ys[j], scale)]);
  }
  if (run.length) out.push(run);
  return out;
}

function bandSvg(u, band, at) {
  const [hi, lo] = band.series;
  const upper = segments(u, hi, at).flat(), lower = segments(u, lo, at).flat().reverse();
  if (!upper.length || !lower.length) return "";
  const points = [...upper, ...lower].map(([x, y]) => `${fixed(x)},${fixed(y)}`).join(" ");
  return `<polygon fill="${esc(call(band.fill, u, hi) ?? "#0002")}" stroke="none" points="${points}"/>`;
}

function lineSvg(u, i, at) {
  const s = u.series[i], stroke = call(s.stroke, u, i);
  if (!s.show || !stroke || stroke === "transparent") return "";
  const dash = s.dash ? ` stroke-dasharray="${s.dash.join(" ")}"` : "";
  return segments(u, i, at).map((run) => `<polyline fill="none" stroke="${esc(stroke)}" stroke-width="${s.width ?? 1}"${dash} ` +
    `points="${run.map(([x, y]) => `${fixed(x)},${fixed(y)}`).join(" ")}"/>`).join("");
}

// Tick labels as uPlot last drew them (its axes keep their splits and texts).
function axesSvg(u, at) {
  const [xAxis, yAxis] = u.axes;
  const { width, height } = at;
  let out = `<rect x="${fixed(at.left)}" y="${fixed(at.top)}" width="${fixed(width)}" height="${fixed(height)}" fill="none" stroke="#ccc"/>`;
  (xAxis._splits ?? []).forEach((v, k) => {
    const x = at.left + u.valToPos(v, "x");
    out += `<text x="${fixed(x)}" y="${fixed(at.top + height + 14)}" text-anchor="middle">${esc(xAxis._values?.[k] ?? v)}</text>`;
  });
  (yAxis._splits ?? []).forEach((v, k) => {
    const y = at.top + u.valToPos(v, u.series[1]?.scale ?? "y");
    out += `<line x1="${fixed(at.left)}" x2="${fixed(at.left + width)}" y1="${fixed(y)}" y2="${fixed(y)}" stroke="#eee"/>` +
      `<text x="${fixed(at.left - 4)}" y="${fixed(y + 4)}" text-anchor="end">${esc(yAxis._values?.[k] ?? v)}</text>`;
  });
  return out;
}

// A swatch and label per drawn series (band edges left out, as in the page's
// legend), wrapped to the chart's width; returns the SVG and its last baseline.
function legendSvg(u, left, top) {
  let svg = "", x = left, y = top;
  for (let i = 1; i < u.series.length; i++) {
    const s = u.series[i], stroke = call(s.stroke, u, i);
    if (!s.show || !stroke || stroke === "transparent" || !s.label || s.class === "band-edge") continue;
    const width = 24 + 7 * String(s.label).length;
    if (x > left && x + width > u.width) x = left, (y += 16);
    svg += `<rect x="${fixed(x)}" y="${fixed(y - 9)}" width="10" height="10" fill="${esc(stroke)}"/>` +
      `<text x="${fixed(x + 14)}" y="${fixed(y)}">${esc(s.label)}</text>`;
    x += width;
  }
  return { svg, bottom: y };
}

// The chart as a standalone SVG document. `marks`: x values drawn as red
// lines with a triangle on top (the run page's alert steps).
export function chartSvg(u, marks = []) {
  const dpr = devicePixelRatio;
  const at = { left: u.bbox.left / dpr, top: u.bbox.top / dpr + 24, width: u.bbox.width / dpr, height: u.bbox.height / dpr };
  const legend = legendSvg(u, at.left, at.top + at.height + 34);
  const height = legend.bottom + 10;
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${u.width}" height="${fixed(height)}" font-family="sans-serif" font-size="11">` +
    `<rect width="100%" height="100%" fill="#fff"/>` +
    `<text x="${fixed(at.left)}" y="16" font-size="13" font-weight="600">${esc(u.root.querySelector(".u-title")?.textContent ?? "")}</text>` +
    axesSvg(u, at);
  for (const band of u.bands ?? []) svg += bandSvg(u, band, at);
  for (let i = 1; i < u.series.length; i++) svg += lineSvg(u, i, at);
  for (const x of marks) {
    const px = at.left + u.valToPos(x, "x");
    if (px < at.left || px > at.left + at.width) continue;
    svg += `<line x1="${fixed(px)}" x2="${fixed(px)}" y1="${fixed(at.top)}" y2="${fixed(at.top + at.height)}" stroke="#cf222e" stroke-opacity="0.45"/>` +
      `<path class="mark" d="M${fixed(px - 5)},${fixed(at.top)} l10,0 l-5,8 z" fill="#cf222e"/>`;
  }
  svg += legend.svg;
  return svg + "</svg>";
}
