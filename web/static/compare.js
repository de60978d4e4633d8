// The compare view (the precision post-mortem starts here): a grid of chosen
// metrics, each a chart of every chosen run in that run's own colour
// (palette.js, by its place in the URL's run list, the same in every chart),
// aligned by step, tokens or wall time since its start; alert episodes and
// non-finite values marked per run; the legend shows or hides a run in every
// chart; the config fields in which the runs differ beside the charts. The
// URL holds the view.
import { fetchJson as json } from "./series.js";
import { downloadPng, downloadSvg, chartSvg } from "./chart_export.js";
import { metricChart } from "./compare_chart.js";
import { loadRunSeries, loadEpisodes, tokensPerStep, stepToX, runApi } from "./compare_data.js";
import { showLegend, showConfigDiff } from "./compare_side.js";

const $ = (sel) => document.querySelector(sel);
const params = new URLSearchParams(location.search);
// A list parameter, a,b with each item URL-encoded: split the raw text on
// its literal commas before decoding, so a name holding a comma (%2C) stays one.
function listParam(name) {
  const raw = location.search.slice(1).split("&").find((p) => p.startsWith(`${name}=`));
  return raw ? raw.slice(name.length + 1).split(",").filter(Boolean).map((n) => decodeURIComponent(n.replace(/\+/g, " "))) : [];
}
const names = listParam("runs");
const DEFAULT_KEYS = ["loss", "grad_norm", "lr"];
const HEIGHT = 300;

// Exposed for the end-to-end test and the console.
const state = (window.hlatCompare = {
  runs: [],      // { name, index (palette slot), shown, status, config, episodes, nonFiniteFrom ([first, last] steps), perStep }
  keys: [],      // the metrics drawn, in the order picked
  key: null,     // the first of them (a link or test that names one metric)
  charts: {},    // metric -> uPlot
  chart: null,   // the first metric's chart
  series: {},    // metric -> the runs drawn in it, x-aligned ({ name, s, ... })
  entries: {},   // metric catalogue entries of the runs' keys
  draws: 0,
  firstDrawMs: null,  // ms from navigation to the first grid on screen
  csv: (key = state.key) => chartCsv(key),
  svg: (key = state.key) => chartSvg(state.charts[key]),
});

const view = () => ({ align: $("#align").value, smoothing: Number($("#smoothing").value), log: $("#log").checked,
                      cols: Number($("#cols").value) });

function writeUrl() {
  const list = (items) => items.map(encodeURIComponent).join(",");
  const { align, smoothing, log, cols } = view();
  const hidden = state.runs.filter((r) => !r.shown).map((r) => r.name);
  const parts = [`runs=${list(names)}`, `key=${list(state.keys)}`, `align=${align}`, `smooth=${smoothing}`, `cols=${cols}`];
  if (log) parts.push("log=1");
  if (hidden.length) parts.push(`hide=${list(hidden)}`);
  history.replaceState(null, "", `?${parts.join("&")}`);
}

// The columns the grid has room for (each chart at least MIN_WIDTH wide, up
// to the number picked), and a chart's width: the grid's, shared by them.
const MIN_WIDTH = 360;
function columns(cols) {
  return Math.max(1, Math.min(cols, Math.floor(($("#chart").clientWidth + 12) / (MIN_WIDTH + 12))));
}
function chartWidth(cols) {
  const grid = $("#chart"), n = columns(cols);
  const gap = parseFloat(getComputedStyle(grid).columnGap) || 0;
  return Math.max(200, Math.floor((grid.clientWidth - (n - 1) * gap) / n) - 10);
}

// Each (run, metric, width) is fetched once; a run without the metric is null.
const fetched = new Map();
function seriesOf(name, key, width) {
  const id = JSON.stringify([name, key, width]);
  if (!fetched.has(id)) fetched.set(id, loadRunSeries(name, key, width).then((s) => (s.steps.length ? s : null), () => null));
  return fetched.get(id);
}

// A run's series, episodes and non-finite buckets with x under `align`.
function aligned(r, s, align) {
  const toX = stepToX(align, s, r.perStep);
  return {
    name: r.name, index: r.index, get shown() { return r.shown; },
    s: { ...s, steps: s.steps.map(toX) },
    episodes: r.episodes.map((e) => ({ ...e, x0: toX(e.first_step), x1: toX(e.last_step), xw: toX(e.worst_step ?? e.first_step) })),
    nonFinite: s.nonFinite.map((nf) => ({ ...nf, x0: toX(nf.first), x1: toX(nf.last) })),
  };
}

// A draw overtaken by a later one (the picks changed again before its
// series came back) drops what it fetched, so the grid shows the last picks.
let drawsStarted = 0;
async function draw() {
  const ticket = ++drawsStarted;
  writeUrl();
  const { align, cols } = view();
  const width = chartWidth(cols);
  if (align === "tokens") await Promise.all(state.runs.map(async (r) => (r.perStep ??= await tokensPerStep(r.name))));
  const perKey = await Promise.all(state.keys.map((key) => Promise.all(state.runs.map((r) => seriesOf(r.name, key, width)))));
  if (ticket !== drawsStarted) return;
  state.series = {};
  state.keys.forEach((key, k) => {
    state.series[key] = state.runs.flatMap((r, i) => (perKey[k][i] ? [aligned(r, perKey[k][i], align)] : []));
  });
  const noTokens = state.runs.filter((r) => !r.perStep).map((r) => r.name);
  $("#align-note").textContent = align === "tokens" && noTokens.length ? `x is the step for ${noTokens.join(", ")} (no token count)` : "";
  for (const r of state.runs) {
    // The earliest non-finite element over the charts: [first, last] steps (equal when exact, a bucket's else).
    const firsts = state.keys.flatMap((k, i) => perKey[i][state.runs.indexOf(r)]?.nonFinite.map((nf) => [nf.first, nf.last]) ?? []);
    r.nonFiniteFrom = firsts.length ? firsts.reduce((a, b) => (b[0] < a[0] || (b[0] === a[0] && b[1] < a[1]) ? b : a)) : null;
  }
  buildCharts(width);
  legend();
}

// The grid, rebuilt: one box per metric with its chart, its export buttons
// and the runs it lacks.
function buildCharts(width) {
  const { smoothing, log, cols } = view();
  // Destroyed, not just dropped: the cursor sync group holds every chart in it.
  for (const u of Object.values(state.charts)) u.destroy();
  state.charts = {};
  zoomSync.ready = false;
  const grid = $("#chart");
  grid.style.setProperty("--cols", String(columns(cols)));
  grid.replaceChildren(...state.keys.map((key) => {
    const box = Object.assign(document.createElement("div"), { className: "chart" });
    box.dataset.key = key;
    const drawn = new Set(state.series[key].map((r) => r.name));
    const lacking = state.runs.filter((r) => !drawn.has(r.name)).map((r) => r.name);
    box.append(chartTools(key));
    if (lacking.length)
      box.append(Object.assign(document.createElement("p"), { className: "lacking", textContent: `no ${key} in: ${lacking.join(", ")}` }));
    if (!drawn.size) return box;
    const title = state.entries[key]?.title ?? key;
    state.charts[key] = metricChart(box, { key, title, runs: state.series[key], smoothing, log, width, height: HEIGHT,
                                           sync: "hlat-compare", onXScale: zoomSync });
    box.querySelector(".u-title")?.setAttribute("title", title);
    return box;
  }));
  state.key = state.keys[0] ?? null;
  state.chart = state.charts[state.key] ?? null;
  zoomSync.ready = true;
  requestAnimationFrame(() => {
    state.draws++;
    state.firstDrawMs ??= performance.now();
  });
}

// A drag-zoom in one chart zooms them all (once every chart is built: each
// sets its own range when made).
function zoomSync(u) {
  if (!zoomSync.ready || zoomSync.busy) return;
  zoomSync.busy = true;
  const { min, max } = u.scales.x;
  for (const other of Object.values(state.charts)) if (other !== u) other.setScale("x", { min, max });
  zoomSync.busy = false;
}

function chartTools(key) {
  const tools = Object.assign(document.createElement("span"), { className: "compare-tools" });
  const name = `compare-${key.replace(/[^\w.-]+/g, "_")}`;
  const button = (text, act) => {
    const b = Object.assign(document.createElement("button"), { type: "button", textContent: text, title: `${text} of this chart` });
    b.addEventListener("click", () => state.charts[key] && act(state.charts[key]));
    return b;
  };
  tools.append(button("CSV", () => downloadCsv(key, name)), button("PNG", (u) => downloadPng(u, name)),
               button("SVG", (u) => downloadSvg(u, name)));
  return tools;
}

// Shows or hides runs in every chart: their envelopes, lines and marks.
function setShown(runs, show) {
  for (const r of runs) r.shown = show;
  const picked = new Set(runs.map((r) => r.name));
  for (const u of Object.values(state.charts)) {
    u.batch(() => u.hlat.owner.forEach((o, i) => {
      if (o && picked.has(o.name) && u.series[i].show !== show) u.setSeries(i, { show });
    }));
    u.redraw(false);
  }
  legend();
  writeUrl();
}

function legend() {
  showLegend($("#legend"), state.runs, { onToggle: (r, show) => setShown([r], show), onAll: (show) => setShown(state.runs, show) });
}

// The first draw waits only for what it shows: the runs, their alerts, the
// series of the metrics the link names (loss, grad_norm and lr when it names
// none; those no run has are dropped) and, for the charts' titles, the first
// run's keys. All are asked for at once; the other runs' keys (the picker)
// come after.
async function start() {
  if (names.length < 2) throw new Error("give two or more runs: compare.html?runs=a,b");
  restoreControls();
  const width = chartWidth(view().cols);
  const runsAsked = json("/api/v1/runs");
  const keysAsked = names.map((n) => json(runApi(n, "/keys")).catch(() => null));
  const linked = listParam("key");
  const wanted = linked.length ? linked : DEFAULT_KEYS;
  const present = wanted.map(async (key) => (await Promise.all(names.map((n) => seriesOf(n, key, width)))).some(Boolean));
  const episodesAsked = Promise.all(names.map((n) => loadEpisodes(n).catch(() => [])));
  chooseRuns((await runsAsked).runs);
  const episodes = await episodesAsked;
  state.runs.forEach((r, i) => (r.episodes = episodes[i]));
  Object.assign(state.entries, (await keysAsked[0])?.metrics);
  const has = await Promise.all(present);
  state.keys = wanted.filter((_, i) => has[i]);
  legend();
  listen();
  const replies = Promise.all(keysAsked).then((all) => all.map((k) => k ?? { keys: [], panels: [], metrics: {} }));
  if (!state.keys.length) state.keys = fillPicker(await replies).slice(0, 1);
  await draw();
  fillPicker(await replies);
  markPicked();
  for (const [key, u] of Object.entries(state.charts)) {
    const title = u.root.querySelector(".u-title");
    if (title && state.entries[key]?.title) title.textContent = title.title = state.entries[key].title;
  }
}

function restoreControls() {
  if (params.has("align")) $("#align").value = params.get("align");
  if (params.has("smooth")) $("#smoothing").value = params.get("smooth");
  if (params.has("cols")) $("#cols").value = params.get("cols");
  $("#log").checked = params.get("log") === "1";
}

// The runs named in the link, each with its palette slot (its place there).
function chooseRuns(runs) {
  const hidden = new Set(listParam("hide"));
  state.runs = names.map((name, index) => {
    const r = runs.find((x) => x.name === name);
    if (!r) throw new Error(`no run "${name}"`);
    return { name, index, shown: !hidden.has(name), status: r.status, config: r.config, episodes: [], nonFiniteFrom: null,
             perStep: null };
  });
  $("#run-count").textContent = `${names.length} runs`;
  $("#report").href = `/api/v1/report?runs=${encodeURIComponent(JSON.stringify(names))}`;
  showConfigDiff($("#diff"), $("#diff-note"), state.runs);
}

// The picker: every key of any run under its catalogue group, in the
// catalogue's order; keys only some runs have are marked with those runs.
// Returns every key.
function fillPicker(replies) {
  const keys = replies.map((k) => new Set(k.keys));
  const ordered = [...new Set(replies.flatMap((r) => r.panels.filter((p) => !p.per_rank).flatMap((p) => p.keys)))];
  for (const r of replies) Object.assign(state.entries, r.metrics);
  const groups = new Map();
  for (const k of ordered) {
    const group = state.entries[k]?.group ?? "metrics";
    if (!groups.has(group)) groups.set(group, Object.assign(document.createElement("optgroup"), { label: group }));
    const having = names.filter((_, i) => keys[i].has(k));
    const note = having.length === names.length ? "" : ` (${having.length} of ${names.length} runs)`;
    groups.get(group).append(Object.assign(document.createElement("option"), { value: k, textContent: k + note,
                                                                                 title: state.entries[k]?.title ?? k }));
  }
  $("#key").replaceChildren(...groups.values());
  return ordered;
}

const markPicked = () => [...$("#key").options].forEach((o) => (o.selected = state.keys.includes(o.value)));

function listen() {
  const redraw = () => draw().catch(fail);
  // A click adds or removes one metric (no ctrl needed); the keyboard and
  // scripts get the select's own behaviour through "change".
  $("#key").addEventListener("mousedown", (e) => {
    if (e.target.tagName !== "OPTION") return;
    e.preventDefault();
    e.target.selected = !e.target.selected;
    $("#key").dispatchEvent(new Event("change"));
  });
  $("#key").addEventListener("change", () => {
    const picked = [...$("#key").selectedOptions].map((o) => o.value);
    state.keys = [...state.keys.filter((k) => picked.includes(k)), ...picked.filter((k) => !state.keys.includes(k))];
    redraw();
  });
  $("#key-search").addEventListener("input", () => {
    const words = $("#key-search").value.toLowerCase().split(/\s+/).filter(Boolean);
    for (const o of $("#key").options) o.hidden = !words.every((w) => `${o.value} ${o.title}`.toLowerCase().includes(w));
  });
  for (const sel of ["#align", "#smoothing", "#log", "#cols"]) $(sel).addEventListener("change", redraw);
  $("#side-toggle").addEventListener("click", () => {
    const open = $(".compare-page").classList.toggle("side-hidden") === false;
    $("#side-toggle").setAttribute("aria-expanded", String(open));
    $("#side-toggle").textContent = open ? "hide side panel" : "show side panel";
    resize();
  });
  let pending = null;
  addEventListener("resize", () => { clearTimeout(pending); pending = setTimeout(resize, 150); });
}

function resize() {
  $("#chart").style.setProperty("--cols", String(columns(view().cols)));
  const width = chartWidth(view().cols);
  for (const u of Object.values(state.charts)) u.setSize({ width, height: HEIGHT });
}

// A chart's data as CSV: x, then each run's line (bucket mean or value) and
// its envelope (bucket min and max), one row per x of the chart.
function chartCsv(key) {
  const runs = state.series[key] ?? [];
  const rows = new Map();
  runs.forEach((r, k) => r.s.steps.forEach((x, i) => {
    if (x === null) return;
    if (!rows.has(x)) rows.set(x, new Array(3 * runs.length).fill(""));
    rows.get(x).splice(3 * k, 3, r.s.line[i] ?? "", r.s.min[i] ?? "", r.s.max[i] ?? "");
  }));
  const header = [view().align, ...runs.flatMap((r) => [r.name, `${r.name}:min`, `${r.name}:max`])];
  return [header, ...[...rows].sort((a, b) => a[0] - b[0]).map(([x, cells]) => [x, ...cells])]
    .map((row) => row.map((c) => (/[",\n]/.test(String(c)) ? `"${String(c).replace(/"/g, '""')}"` : c)).join(","))
    .join("\n") + "\n";
}

function downloadCsv(key, name) {
  const a = Object.assign(document.createElement("a"), { download: `${name}.csv` });
  a.href = URL.createObjectURL(new Blob([chartCsv(key)], { type: "text/csv" }));
  a.click();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

function fail(e) {
  $("#message").textContent = `Cannot compare: ${e.message}`;
}

start().catch(fail);
