// One metric of every compared run on one uPlot chart: each run's envelope
// and line in its palette colour, its alert episodes as markers along the
// top edge, its non-finite values along the bottom (a strip from the first
// one on, a glyph at each), and a hover readout that names runs, since
// twelve colours are too many to tell apart from a legend alone.
import { envelopeParts, finite, yTicks } from "./series.js";
import { runColor, runDash } from "./palette.js";

const GLYPH = { nan: "×", inf: "▲", "-inf": "▼" };
const SPELLED = { nan: "NaN", inf: "+Inf", "-inf": "-Inf" };
const STRIP = 9;  // CSS px of one run's non-finite strip
const MARGIN = 26; // CSS px above the plot for the episode markers (four staggered rows)

// Log y over the data, widened to one significant digit each way: uPlot's
// log ticks count up from the range's low end, so a low end of 1.53 would
// tick at 1.53, 2.53, ...; and snapping to whole decades wastes the plot.
function logRange(u, lo, hi) {
  if (!(lo > 0) || !(hi > 0)) return [0.1, 10];
  const down = (v) => { const p = 10 ** Math.floor(Math.log10(v)); return Math.floor(v / p) * p; };
  const up = (v) => { const p = 10 ** Math.floor(Math.log10(v)); return Math.ceil(v / p) * p; };
  const a = down(lo), b = up(hi);
  return a === b ? [a / 2, b * 2] : [a, b];
}

// Every x any run has, ascending: runs on different step grids share the axis.
function unionX(runs) {
  const all = new Set();
  for (const r of runs) for (const x of r.s.steps) if (x !== null) all.add(x);
  return Float64Array.from(all).sort();
}

// runs: [{ name, index (palette slot), shown, s (series whose steps are x),
//          episodes: [{ ...episode, x0, x1, xw }], nonFinite: [{ x0, x1, kind, first, last }] }]
// Returns the uPlot, with .hlat = { key, runs, owner (series index -> run),
// offset (run -> its first series), marks (what the last draw marked) }.
export function metricChart(el, { key, title, runs, smoothing, log, width, height, sync, onXScale }) {
  const xs = Array.from(unionX(runs));
  const data = [xs], series = [{ label: "x" }], bands = [], owner = [null], offset = new Map();
  for (const r of runs) {
    const parts = envelopeParts(r.s, xs, { color: runColor(r.index), smoothing, label: r.name, log, offset: data.length });
    offset.set(r, data.length);
    for (const p of parts.series) {
      p.show = r.shown;
      p.dash = runDash(r.index);
      owner.push(r);
    }
    data.push(...parts.data);
    series.push(...parts.series);
    bands.push(...parts.bands);
  }
  const hlat = { key, runs, owner, offset, marks: [], hover: false };
  const u = new uPlot({
    width, height, title, series, bands, legend: { show: false }, padding: [MARGIN, null, null, null],
    cursor: { drag: { x: true, y: false }, sync: { key: sync } },
    scales: { x: { time: false }, y: log ? { distr: 3, range: logRange } : {} },
    axes: [{}, { size: 60, values: yTicks }],
    hooks: {
      draw: [(u) => (hlat.marks = drawMarks(u, runs))],
      setScale: [(u, scaleKey) => scaleKey === "x" && onXScale?.(u)],
      setCursor: [(u) => showReadout(u)],
    },
  }, data, el);
  u.hlat = hlat;
  const tip = Object.assign(document.createElement("div"), { className: "readout" });
  u.over.append(tip);
  // Synced cursors move in every chart; only the one under the mouse reads out.
  u.over.addEventListener("mouseenter", () => (hlat.hover = true));
  u.over.addEventListener("mouseleave", () => { hlat.hover = false; tip.hidden = true; });
  return u;
}

// A pixel column of the plot (canvas pixels) for x, or null outside it.
function column(u, x) {
  if (x === null || x === undefined) return null;
  const px = u.valToPos(x, "x", true);
  return px >= u.bbox.left - 0.5 && px <= u.bbox.left + u.bbox.width + 0.5 ? px : null;
}

// Alert episodes, in the margin above the plot so they never cover a line:
// a triangle at the worst step (filled for warnings and worse, hollow for
// info), a bar over first..last when wider; staggered in four rows so
// several runs alerting at one step stay countable.
function drawEpisodes(u, r, slot, marks) {
  const { ctx, bbox } = u, pr = devicePixelRatio, color = runColor(r.index);
  const y = bbox.top + (2 + 5 * (slot % 4) - MARGIN) * pr, half = 4.5 * pr;
  for (const e of r.episodes) {
    const px = column(u, e.xw ?? e.x0);
    if (px === null) continue;
    const a = column(u, e.x0) ?? px, b = column(u, e.x1) ?? px;
    if (b - a > 2 * pr) {
      ctx.fillStyle = color;
      ctx.fillRect(a, y, b - a, 2 * pr);
    }
    ctx.beginPath();
    ctx.moveTo(px - half, y);
    ctx.lineTo(px + half, y);
    ctx.lineTo(px, y + 2 * half);
    ctx.closePath();
    ctx.fillStyle = e.severity === "info" ? "#ffffff" : color;
    ctx.fill();
    ctx.lineWidth = pr;
    ctx.strokeStyle = e.severity === "info" ? color : "#1b1f24";
    ctx.stroke();
    marks.push({ what: "episode", run: r.name, color, x: px / pr, step: e.worst_step ?? e.first_step, episode: e });
  }
}

// Non-finite values: a pale strip in the run's colour from its first
// non-finite bucket to the right edge, and a glyph at each (× NaN, ▲ +Inf,
// ▼ -Inf), one per pixel column; each run that has any gets a row.
function drawNonFinite(u, r, row, marks) {
  const { ctx, bbox } = u, pr = devicePixelRatio, color = runColor(r.index);
  const top = bbox.top + bbox.height - (row + 1) * STRIP * pr;
  const first = column(u, r.nonFinite[0].x0) ?? (r.nonFinite[0].x0 < u.scales.x.min ? bbox.left : null);
  if (first !== null) {
    ctx.fillStyle = color + "40";
    ctx.fillRect(first, top, bbox.left + bbox.width - first, STRIP * pr);
  }
  ctx.fillStyle = color;
  ctx.font = `${STRIP * pr}px system-ui, sans-serif`;
  ctx.textAlign = "center";
  ctx.textBaseline = "bottom";
  const done = new Set();
  for (const nf of r.nonFinite) {
    const px = column(u, nf.x1);
    if (px === null || done.has(`${Math.round(px)}${nf.kind}`)) continue;
    done.add(`${Math.round(px)}${nf.kind}`);
    ctx.fillText(GLYPH[nf.kind], px, top + STRIP * pr + pr);
    marks.push({ what: nf.kind, run: r.name, color, x: px / pr, step: nf.last, first: nf.first });
  }
}

function drawMarks(u, runs) {
  const marks = [];
  u.ctx.save();
  let slot = 0, row = 0;
  for (const r of runs) {
    if (!r.shown) continue;
    if (r.episodes.length) drawEpisodes(u, r, slot++, marks);
    if (r.nonFinite.length) drawNonFinite(u, r, row++, marks);
  }
  u.ctx.restore();
  return marks;
}

const fmt = (v) => (v === null ? "-" : Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3)
                                                                                         : Number(v.toPrecision(4)).toString());

// What the cursor is on, listed by run (highest first): the bucket's mean
// and, when it spans more than one value, its min..max; then any marker
// within 4 px (an episode's kind, steps and message; a non-finite value).
function showReadout(u) {
  const tip = u.over.querySelector(".readout");
  const i = u.cursor.idx;
  if (!tip) return;
  if (!u.hlat.hover || i === null || i === undefined || u.cursor.left < 0) return void (tip.hidden = true);
  const rows = [];
  for (const r of u.hlat.runs) {
    const at = u.hlat.offset.get(r);
    if (!r.shown || at === undefined) continue;
    const [max, min, line] = [u.data[at][i], u.data[at + 1][i], u.data[at + 2][i]].map(finite);
    if (line === null && max === null) continue;
    const range = min !== null && max !== null && max > min ? ` (${fmt(min)} … ${fmt(max)})` : "";
    rows.push({ r, v: line ?? max, text: `${fmt(line ?? max)}${range}` });
  }
  rows.sort((a, b) => b.v - a.v);
  // Marks within 4 px; a run's non-finite glyphs there (one per pixel column,
  // so several in a NaN stretch) are one line with all their steps.
  const near = [];
  for (const m of u.hlat.marks.filter((k) => Math.abs(k.x - u.cursor.left - u.bbox.left / devicePixelRatio) <= 4)) {
    const same = m.what !== "episode" && near.find((k) => k.run === m.run && k.what === m.what);
    if (same) Object.assign(same, { first: Math.min(same.first, m.first), step: Math.max(same.step, m.step) });
    else near.push(m.what === "episode" ? m : { ...m });
  }
  const steps = (a, b) => (a === b ? `at step ${a.toLocaleString("en-US")}`
                                   : `in steps ${a.toLocaleString("en-US")}–${b.toLocaleString("en-US")}`);
  const line = (color, text, className = "") => {
    const div = Object.assign(document.createElement("div"), { className });
    const sw = Object.assign(document.createElement("span"), { className: "swatch" });
    sw.style.background = color;
    div.append(sw, text);
    return div;
  };
  tip.replaceChildren(
    Object.assign(document.createElement("div"), { className: "at", textContent: `x ${fmt(u.data[0][i])}` }),
    ...rows.map(({ r, text }) => line(runColor(r.index), `${r.name}: ${text}`)),
    ...near.map((m) => line(m.color, m.what === "episode"
      ? `⚠ ${m.run}: ${m.episode.kind} (${m.episode.severity}) steps ${m.episode.first_step}–${m.episode.last_step}, ` +
        `${m.episode.count} alert${m.episode.count === 1 ? "" : "s"}${m.episode.message ? `: ${m.episode.message}` : ""}`
      : `${m.run}: ${SPELLED[m.what]} ${steps(m.first, m.step)}`, "mark")));
  tip.classList.toggle("left", u.cursor.left > u.bbox.width / devicePixelRatio / 2);
  tip.hidden = false;
}
