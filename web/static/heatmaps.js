// The model's internals (docs/internals.md): one heatmap per statistic over
// layers, heads or tensors (GET .../heatmap), rows = elements, columns =
// steps, colour = the value. Attention statistics per head are grouped by
// layer with a line between layers; the largest attention logit also gets
// a line of its largest over all heads. Alerts are red lines; the alert whose
// flight-recorder window is shown is marked, its head or tensor outlined.
// Hover names the element, the steps and the value; drag to zoom.
import { fetchJson } from "./series.js";
import { colourScale, formatValue, legend, REDUCED } from "./heatmap_colors.js";

const GUTTER = 130;  // px left of the cells: row names
const AXIS = 18;     // px below the cells: step ticks

export async function loadHeatmaps(api, vectors, { from, to, buckets }) {
  const range = from !== undefined ? `&from=${from}&to=${to}` : "";
  return Promise.all(vectors.map((v) =>
    fetchJson(api(`/heatmap?key=${encodeURIComponent(v.key)}&buckets=${buckets}${range}`))
      .catch((e) => ({ ...v, labels: [], steps: [], values: [], error: e.message }))));
}

// What a row is: "layer 3, head 5", "layer 3", or the tensor's name.
const HEAD = /^layers\.(\d+)\.head\.(\d+)$/, LAYER = /^layers\.(\d+)$/;
function rowName(label) {
  let m = HEAD.exec(label);
  if (m) return `layer ${m[1]}, head ${m[2]}`;
  m = LAYER.exec(label);
  return m ? `layer ${m[1]}` : label;
}
function rowsAre(labels) {
  if (labels.length && labels.every((l) => HEAD.test(l))) return "heads, grouped by layer";
  if (labels.length && labels.every((l) => LAYER.test(l))) return "layers (blocks)";
  return "tensors";
}

// Pixel columns over [s0, s1]: each bucket spans from its first step to the
// next bucket's (stored rows may be every n-th step), several buckets in one
// pixel are combined by the heatmap's own reduction.
function columns(h, s0, s1, width) {
  const n = h.labels.length;
  const cells = new Float32Array(width * n).fill(NaN);
  const first = new Float64Array(width).fill(NaN), last = new Float64Array(width).fill(NaN);
  const px = (s) => ((s - s0) / (s1 - s0 + 1)) * width;
  const combine = h.reduce === "max" ? Math.max : h.reduce === "min" ? Math.min : (a, b) => b;
  h.steps.forEach(([a, b], k) => {
    const end = k + 1 < h.steps.length ? h.steps[k + 1][0] : b + 1;
    const x0 = Math.max(0, Math.floor(px(a))), x1 = Math.min(width, Math.max(x0 + 1, Math.floor(px(end))));
    for (let x = x0; x < x1; x++) {
      if (Number.isNaN(first[x])) first[x] = a;
      last[x] = b;
      for (let i = 0; i < n; i++) {
        const v = h.values[k][i];
        if (v === null) continue;
        const at = x * n + i, old = cells[at];
        cells[at] = Number.isNaN(old) ? v : combine(old, v);
      }
    }
  });
  return { cells, first, last };
}

// About six round step numbers over [s0, s1].
function stepTicks(s0, s1) {
  const raw = (s1 - s0) / 6, mag = 10 ** Math.floor(Math.log10(Math.max(1, raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((t) => t >= raw) ?? 10 * mag;
  const out = [];
  for (let t = Math.ceil(s0 / step) * step; t <= s1; t += step) out.push(t);
  return out;
}

function panel(h, { alerts, marked, zoom, width, onZoom }) {
  const box = document.createElement("div");
  box.className = "heatmap";
  box.dataset.key = h.key;
  const unit = h.unit ? ` (${h.unit})` : "";
  box.append(Object.assign(document.createElement("h3"), { textContent: `${h.title}${unit}` }));
  const about = document.createElement("p");
  about.className = "heatmap-about";
  about.textContent = `${h.key} · rows: ${h.labels.length} ${rowsAre(h.labels)} · columns: steps`;
  box.append(about);
  if (h.error || !h.steps.length) {
    box.append(Object.assign(document.createElement("p"), { className: "notice",
      textContent: h.error ? `Cannot load ${h.key}: ${h.error}` : "No values stored in this step range." }));
    return box;
  }
  const n = h.labels.length, W = Math.max(100, width - GUTTER - 8);
  const rowH = Math.max(2, Math.min(16, Math.floor(320 / n))), H = n * rowH;
  const s0 = zoom ? zoom[0] : h.steps[0][0], s1 = zoom ? zoom[1] : h.steps.at(-1)[1];
  const { cells, first, last } = columns(h, s0, s1, W);
  const scale = colourScale(cells, h.log_scale);
  const canvas = document.createElement("canvas");
  const dpr = devicePixelRatio || 1;
  canvas.width = (GUTTER + W + 8) * dpr; canvas.height = (H + AXIS + 4) * dpr;
  canvas.style.width = `${GUTTER + W + 8}px`; canvas.style.height = `${H + AXIS + 4}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  // The cells, one pixel each, then stretched to their rows.
  const image = new ImageData(W, n);
  for (let x = 0; x < W; x++) for (let i = 0; i < n; i++) {
    const [r, g, b] = scale.at(cells[x * n + i]), o = (i * W + x) * 4;
    image.data[o] = r; image.data[o + 1] = g; image.data[o + 2] = b; image.data[o + 3] = 255;
  }
  const off = Object.assign(document.createElement("canvas"), { width: W, height: n });
  off.getContext("2d").putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, GUTTER, 0, W, H);
  rowLabels(ctx, h.labels, rowH);
  axis(ctx, s0, s1, W, H);
  const xOf = (step) => GUTTER + ((step - s0) / (s1 - s0 + 1)) * W;
  const isMarked = (a) => marked && a.step === marked.step && a.kind === marked.kind;
  for (const a of alerts) if (a.step >= s0 && a.step <= s1) mark(ctx, xOf(a.step), H, isMarked(a));
  const row = marked && h.labels.indexOf(marked.data?.head ?? marked.data?.tensor);
  if (marked && row >= 0) {
    ctx.strokeStyle = "#cf222e"; ctx.lineWidth = 1.5;
    ctx.strokeRect(GUTTER + 0.5, row * rowH - 0.5, W - 1, rowH + 1);
  }
  const wrap = document.createElement("div");
  wrap.className = "heatmap-canvas";
  const tip = Object.assign(document.createElement("div"), { className: "heatmap-tip" });
  const sel = Object.assign(document.createElement("div"), { className: "heatmap-select" });
  wrap.append(canvas, tip, sel);
  hover(canvas, tip, sel, { h, n, W, H, rowH, cells, first, last, s0, s1, onZoom });
  box.append(wrap, legend(scale, h));
  if (h.key === "attn_logit_max") box.append(largestOverHeads(h, s0, s1, W));
  return box;
}

// Row names in the gutter; heads grouped by layer get a line between layers
// and the layer's name at the group's middle.
function rowLabels(ctx, labels, rowH) {
  const H = labels.length * rowH, yOf = (y) => Math.max(6, Math.min(H - 6, y));  // whole, at the edges too
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#57606a";
  ctx.textBaseline = "middle";
  const layerOf = labels.map((l) => HEAD.exec(l)?.[1]);
  if (layerOf.every((l) => l !== undefined)) {
    if (rowH >= 10) {  // each head's number too, at the gutter's right edge
      ctx.textAlign = "end";
      labels.forEach((l, i) => ctx.fillText(`h${HEAD.exec(l)[2]}`, GUTTER - 4, (i + 0.5) * rowH));
      ctx.textAlign = "start";
    }
    let start = 0;
    for (let i = 1; i <= labels.length; i++) {
      if (i < labels.length && layerOf[i] === layerOf[start]) continue;
      if ((i - start) * rowH >= 9) ctx.fillText(`layer ${layerOf[start]}`, 4, yOf(((start + i) / 2) * rowH));
      if (i < labels.length) {
        ctx.fillStyle = "#fff";
        ctx.fillRect(GUTTER, i * rowH - 0.5, ctx.canvas.width, 1);
        ctx.fillStyle = "#57606a";
      }
      start = i;
    }
    return;
  }
  const every = Math.ceil(11 / rowH);
  labels.forEach((l, i) => {
    if (i % every) return;
    let text = rowName(l);
    while (text.length > 4 && ctx.measureText(text).width > GUTTER - 8) text = `…${text.slice(2)}`;
    ctx.fillText(text, 4, yOf((i + 0.5) * rowH));
  });
}

function axis(ctx, s0, s1, W, H) {
  ctx.fillStyle = "#57606a";
  ctx.textBaseline = "top";
  ctx.textAlign = "center";
  for (const t of stepTicks(s0, s1)) {
    const x = GUTTER + ((t - s0) / (s1 - s0 + 1)) * W;
    ctx.fillRect(x, H, 1, 4);
    ctx.fillText(t.toLocaleString("en-US"), Math.min(Math.max(x, GUTTER + 20), GUTTER + W - 20), H + 5);
  }
  ctx.textAlign = "start";
}

// An alert: a translucent red line over the cells; the marked one solid, wider.
function mark(ctx, x, H, marked) {
  ctx.fillStyle = marked ? "#cf222e" : "rgba(207, 34, 46, 0.55)";
  ctx.fillRect(x - (marked ? 1 : 0.5), 0, marked ? 2 : 1, H);
  if (!marked) return;
  ctx.beginPath();
  ctx.moveTo(x - 5, 0); ctx.lineTo(x + 5, 0); ctx.lineTo(x, 7);
  ctx.closePath();
  ctx.fill();
}

function hover(canvas, tip, sel, { h, n, W, H, rowH, cells, first, last, s0, s1, onZoom }) {
  const at = (e) => {
    const r = canvas.getBoundingClientRect();
    return { x: Math.floor(e.clientX - r.left - GUTTER), y: e.clientY - r.top };
  };
  const stepAt = (x) => Math.round(s0 + (Math.max(0, Math.min(W, x)) / W) * (s1 - s0 + 1));
  let dragFrom = null;
  canvas.addEventListener("mousemove", (e) => {
    const { x, y } = at(e), i = Math.floor(y / rowH);
    if (dragFrom !== null) {
      sel.style.display = "block";
      sel.style.left = `${GUTTER + Math.min(dragFrom, x)}px`;
      sel.style.width = `${Math.abs(x - dragFrom)}px`;
      sel.style.height = `${H}px`;
    }
    if (x < 0 || x >= W || i < 0 || i >= n || Number.isNaN(first[x])) { tip.style.display = "none"; return; }
    const a = first[x], b = last[x];
    const steps = a === b ? `step ${a.toLocaleString("en-US")}` : `steps ${a.toLocaleString("en-US")}–${b.toLocaleString("en-US")}`;
    const what = a === b ? "" : ` (${REDUCED[h.reduce] ?? h.reduce})`;
    tip.textContent = `${rowName(h.labels[i])} · ${steps} · ${formatValue(cells[x * n + i])}${h.unit ? ` ${h.unit}` : ""}${what}`;
    tip.title = h.labels[i];
    tip.style.display = "block";
    tip.style.left = `${Math.min(GUTTER + x + 12, GUTTER + W - 260)}px`;
    tip.style.top = `${Math.min(y + 12, H)}px`;
  });
  canvas.addEventListener("mouseleave", () => { tip.style.display = "none"; });
  const up = (e) => {
    const x = at(e).x, from = dragFrom;
    dragFrom = null;
    sel.style.display = "none";
    if (Math.abs(x - from) >= 5) onZoom(stepAt(Math.min(x, from)), stepAt(Math.max(x, from)));
  };
  canvas.addEventListener("mousedown", (e) => {
    dragFrom = at(e).x;
    window.addEventListener("mouseup", up, { once: true });
  });
}

// The largest attention logit over all heads, per column: the one number
// Kimi K2 watched (a bound such as 100 is crossed here first).
function largestOverHeads(h, s0, s1, W) {
  const box = document.createElement("div");
  box.className = "heatmap-line";
  const xs = h.steps.map(([, b]) => b);
  const ys = h.values.map((row) => row.reduce((m, v) => (v !== null && (m === null || v > m) ? v : m), null));
  box.chart = new uPlot({
    title: "largest attention logit over all heads", width: GUTTER + W + 8, height: 130,
    series: [{ label: "step" }, { label: "largest over heads", stroke: "#8250df", width: 1.5, spanGaps: true }],
    scales: { x: { time: false, range: [s0, s1] }, y: { distr: h.log_scale ? 3 : 1 } },
    axes: [{}, { size: GUTTER - 8 }],
    legend: { show: false },
  }, [xs, ys], box);
  return box;
}

// The internals section: a panel per statistic, in the server's order.
// Returns the uPlot charts made (the caller destroys them on the next draw).
export function drawHeatmaps(container, heatmaps, options) {
  const boxes = heatmaps.map((h) => panel(h, options));
  container.replaceChildren(...boxes);
  return boxes.flatMap((b) => [...b.querySelectorAll(".heatmap-line")].map((l) => l.chart));
}
