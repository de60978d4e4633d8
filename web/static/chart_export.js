// A drawn uPlot chart as a file: PNG from its canvas (on white, with its
// title and legend), SVG rebuilt as vectors from its data and scales (bands,
// lines, axes' ticks, legend and any marks), so a figure can go into a paper
// or a post-mortem at any size.

const call = (v, ...args) => (typeof v === "function" ? v(...args) : v);
const esc = (s) => String(s).replace(/[<>&"]/g, (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]);
const fixed = (v) => v.toFixed(1);

// The chart as a PNG a slide or a bug report can take as it is: an opaque
// white background, the chart's title above and its legend below (the
// canvas alone is transparent and has neither).
export function pngCanvas(u) {
  const dpr = devicePixelRatio, src = u.ctx.canvas;
  const titleH = 26 * dpr, rowH = 16 * dpr, left = u.bbox.left;
  const rows = legendRows(legendItems(u), left / dpr, u.width);
  const out = document.createElement("canvas");
  out.width = src.width;
  out.height = titleH + src.height + (rows.length ? rows.length * rowH + 10 * dpr : 0);
  const ctx = out.getContext("2d");
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, out.width, out.height);
  ctx.fillStyle = "#1b1f24";
  ctx.font = `600 ${13 * dpr}px sans-serif`;
  ctx.fillText(chartTitle(u), left, 18 * dpr);
  ctx.drawImage(src, 0, titleH);
  ctx.font = `${11 * dpr}px sans-serif`;
  rows.forEach((row, r) => {
    const y = titleH + src.height + (r + 1) * rowH;
    for (const { x, label, color } of row) {
      ctx.fillStyle = color;
      ctx.fillRect(x * dpr, y - 9 * dpr, 10 * dpr, 10 * dpr);
      ctx.fillStyle = "#1b1f24";
      ctx.fillText(label, (x + 14) * dpr, y);
    }
  });
  return out;
}

export function downloadPng(u, name) {
  const a = document.createElement("a");
  a.href = pngCanvas(u).toDataURL("image/png");
  a.download = `${name}.png`;
  a.click();
}

const chartTitle = (u) => u.root.querySelector(".u-title")?.textContent ?? "";

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
    // undefined: the series has no point at this x (joined across); null:
    // a gap (a non-finite value), kept unless the series spans gaps.
    if (ys[j] === undefined) continue;
    if (ys[j] === null || !Number.isFinite(ys[j])) {
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
// legend): [{ label, color }].
function legendItems(u) {
  const out = [];
  for (let i = 1; i < u.series.length; i++) {
    const s = u.series[i], color = call(s.stroke, u, i);
    if (!s.show || !color || color === "transparent" || !s.label || s.class === "band-edge") continue;
    out.push({ label: String(s.label), color });
  }
  return out;
}

// The legend's items wrapped to `width` CSS pixels from `left`: rows of { x, label, color }.
function legendRows(items, left, width) {
  const rows = [];
  let row = [], x = left;
  for (const item of items) {
    const w = 24 + 7 * item.label.length;
    if (row.length && x + w > width) rows.push(row), (row = []), (x = left);
    row.push({ ...item, x });
    x += w;
  }
  if (row.length) rows.push(row);
  return rows;
}

// The legend as SVG from `top`; returns the SVG and its last baseline.
function legendSvg(u, left, top) {
  const rows = legendRows(legendItems(u), left, u.width);
  let svg = "";
  rows.forEach((row, r) => {
    const y = top + 16 * r;
    for (const { x, label, color } of row) {
      svg += `<rect x="${fixed(x)}" y="${fixed(y - 9)}" width="10" height="10" fill="${esc(color)}"/>` +
        `<text x="${fixed(x + 14)}" y="${fixed(y)}">${esc(label)}</text>`;
    }
  });
  return { svg, bottom: top + 16 * Math.max(0, rows.length - 1) };
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
    `<text x="${fixed(at.left)}" y="16" font-size="13" font-weight="600">${esc(chartTitle(u))}</text>` +
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
