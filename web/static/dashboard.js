// A run's dashboard: one uPlot chart per panel, fed by the JSON API and kept
// live by the run's event stream. Downsampled series are envelopes (each
// bucket's min..max as a band, its mean as the line), so a one-step event is
// visible at any zoom; alerts are red markers on every chart and a list that
// zooms to them; grad-norm spike episodes are shaded from the full-resolution
// data (server side). Statistics over layers, heads and tensors are heatmaps
// below the charts (heatmaps.js); an alert with a flight-recorder window
// zooms everything to it. An alert the trainer could attribute says why under
// it (attribution.js: the tensor that moved first, the batch's worst sequences
// with their documents and text); a rewind_skip's rewind is drawn on the
// charts and listed with its alert. Every key the run has can be drawn (the
// metric picker); the URL holds the view, so a link restores it.
import { COLORS, fetchJson, loadSeries, appendLive, envelopeParts, yTicks, rangeFrom } from "./series.js";
import { chartSvg, downloadPng, downloadSvg } from "./chart_export.js";
import { evalPanels, drawEvalPanel } from "./eval_panels.js";
import { loadUptime } from "./uptime.js";
import { showPreflight } from "./preflight.js";
import { loadRankPanels, drawRankPanel } from "./rank_panels.js";
import { showStoreHealth } from "./store_health.js";
import { loadHeatmaps, drawHeatmaps } from "./heatmaps.js";
import { rewindsOf } from "./attribution.js";
import { showAlertList } from "./alert_list.js";

const params = new URLSearchParams(location.search);
const runName = params.get("run");
const runBase = `/api/v1/runs/${encodeURIComponent(runName)}`;
const api = (path) => `${runBase}${path}`;
const $ = (sel) => document.querySelector(sel);

// The charts come from the server's metric catalogue (GET .../keys: each key's
// title, unit, group and panel, and the panels the run's keys make, in
// order), so every key the run has is drawable and a new one needs no list
// here. The default view: the keys whose entry is `shown`.
const entryOf = (key) => state.catalogue.metrics[key];
const isDefault = (key) => Boolean(entryOf(key)?.shown);

// Exposed for the end-to-end test and for poking at from the console.
const state = (window.hlatDashboard = {
  keys: [],          // every key the run has
  catalogue: { metrics: {}, rank_metrics: {}, panels: [] },  // the run's keys as the catalogue sees them
  shown: null,       // keys drawn (Set); null until the keys are known
  series: {},        // key -> loadSeries() result
  alerts: [],
  alertsOmitted: 0,  // earlier alerts the server left out of its list
  rewinds: [],       // rewind_skip's rewinds, from the events (attribution.js rewindsOf)
  whyOpen: new Set(), // "kind@step" of the alerts whose "Why" is open (kept across redraws)
  episodes: [],      // [first, last, peak_step, peak] of grad-norm spikes
  xAxis: params.get("x") || "step",
  smoothing: params.has("smooth") ? Number(params.get("smooth")) : 0.6,
  zoom: params.has("from") ? [Number(params.get("from")), Number(params.get("to"))] : null,
  logPanels: new Set((params.get("log") || "").split(",").filter(Boolean)),
  yFrom: params.has("yfrom") ? Number(params.get("yfrom")) : null,  // fit y to steps >= this
  charts: {},        // panel id -> uPlot
  tokensPerStep: null,
  lastStep: -1,
  status: null,
  evals: [],
  rankPanels: [],    // per-rank series of a distributed run (rank_panels.js)
  haltRoute: null,   // what a halt does for this run ("" when nothing here can stop it)
  drawn: 0,          // draws so far (the bench waits for the first)
  loadFailed: false, // the message shows a load error (cleared by the next good load)
  heatmaps: [],      // GET .../heatmap replies, one per vector key of the run
  heatmapCharts: [], // their uPlot lines (destroyed on each heatmap draw)
  marked: null,      // the alert whose flight-recorder window is shown
});

// The view in the URL: run, drawn keys (when not the default), zoom,
// smoothing, x axis, log-scale panels, the y fit.
function saveView() {
  const p = new URLSearchParams({ run: runName });
  if (state.shown) {
    const present = state.keys.filter(isDefault);
    const custom = [...state.shown].sort();
    if (custom.join() !== present.sort().join()) p.set("keys", custom.join(","));
  }
  if (state.zoom) { p.set("from", state.zoom[0]); p.set("to", state.zoom[1]); }
  if (state.smoothing !== 0.6) p.set("smooth", state.smoothing);
  if (state.xAxis !== "step") p.set("x", state.xAxis);
  if (state.logPanels.size) p.set("log", [...state.logPanels].join(","));
  if (state.yFrom !== null) p.set("yfrom", state.yFrom);
  history.replaceState(null, "", `?${p}`);
  $("#permalink").value = location.href;
}

// Panels to draw: the catalogue's run panels, in its order, each with the
// keys shown (a panel with none is left out).
function panels() {
  const out = [];
  for (const p of state.catalogue.panels) {
    if (p.per_rank) continue;
    const keys = p.keys.filter((k) => state.shown.has(k));
    if (keys.length) out.push({ id: p.id, title: p.title, keys, episodes: p.shade || null });
  }
  return out;
}

function xOf(step, time) {
  if (state.xAxis === "tokens" && state.tokensPerStep) return (step + 1) * state.tokensPerStep;
  if (state.xAxis === "time") return time ?? null;
  return step;
}

const alertXs = () => state.alerts.map((a) => xOf(a.step, a.time)).filter((x) => x !== null);
state.svg = (panelId) => chartSvg(state.charts[panelId], alertXs());  // for the end-to-end test

// uPlot data for a panel: x = the union of its keys' steps (as steps, tokens
// or time), then each key's envelope parts.
function chartData(panel) {
  const times = new Map();
  for (const k of panel.keys) state.series[k]?.steps.forEach((s, i) => times.set(s, state.series[k].times[i]));
  const steps = [...times.keys()].sort((a, b) => a - b).filter((s) => xOf(s, times.get(s)) !== null);
  const data = [steps.map((s) => xOf(s, times.get(s)))];
  const series = [{ label: state.xAxis }];
  const bands = [];
  panel.keys.forEach((key, i) => {
    const s = state.series[key];
    if (!s || !s.steps.length) return;
    const parts = envelopeParts(s, steps, { color: COLORS[i % COLORS.length], smoothing: state.smoothing,
                                            log: state.logPanels.has(panel.id), offset: data.length });
    data.push(...parts.data);
    series.push(...parts.series);
    bands.push(...parts.bands);
  });
  return { steps, data, series, bands };
}

// Draw hooks: spike episodes shaded, alerts as red lines.
function shadeEpisodes(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = "rgba(212, 119, 12, 0.18)";
  for (const [first, last] of state.episodes) {
    const xa = xOf(first, stepTime(first)), xb = xOf(last, stepTime(last));
    if (xa === null || xb === null) continue;
    const left = u.valToPos(xa, "x", true), right = Math.max(u.valToPos(xb, "x", true), left + 2 * devicePixelRatio);
    ctx.fillRect(left, u.bbox.top, right - left, u.bbox.height);
  }
  ctx.restore();
}

// Each alert: a solid red triangle on the top edge and a translucent line
// down the chart, so the data under it stays visible.
function alertMarkers(u) {
  const ctx = u.ctx, dpr = devicePixelRatio, top = u.bbox.top;
  ctx.save();
  ctx.strokeStyle = "rgba(207, 34, 46, 0.45)";
  ctx.fillStyle = "#cf222e";
  ctx.lineWidth = dpr;
  for (const a of state.alerts) {
    const x = xOf(a.step, a.time);
    if (x === null) continue;
    const px = u.valToPos(x, "x", true);
    if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
    ctx.beginPath();
    ctx.moveTo(px, top);
    ctx.lineTo(px, top + u.bbox.height);
    ctx.stroke();
    ctx.beginPath();
    ctx.moveTo(px - 5 * dpr, top);
    ctx.lineTo(px + 5 * dpr, top);
    ctx.lineTo(px, top + 8 * dpr);
    ctx.closePath();
    ctx.fill();
  }
  ctx.restore();
}

// Each rewind: a dashed purple line at the step training restarted from and
// an arrow back to it from the alert's step, under the alert's triangle: the
// steps in between were trained again, without the skipped batches. By wall
// time, where nothing goes back, the line only, at the rewind.
const REWIND = "#8250df";
function rewindXs(r) {
  if (state.xAxis === "time") return [null, r.time];
  const restart = r.restartedAt ?? r.atMost;
  return [xOf(r.step, null), restart === undefined || restart === null ? null : xOf(restart, null)];
}
function rewindMarkers(u) {
  const ctx = u.ctx, dpr = devicePixelRatio, { left, top, width, height } = u.bbox;
  const clamp = (px) => Math.min(left + width, Math.max(left, px));
  const y = top + 12 * dpr;
  ctx.save();
  ctx.strokeStyle = REWIND;
  ctx.fillStyle = REWIND;
  ctx.lineWidth = 1.5 * dpr;
  for (const r of state.rewinds) {
    const [xa, xr] = rewindXs(r);
    if (xr === null) continue;
    const pr = u.valToPos(xr, "x", true);
    if (pr >= left && pr <= left + width) {
      ctx.setLineDash([4 * dpr, 3 * dpr]);
      ctx.beginPath();
      ctx.moveTo(pr, top);
      ctx.lineTo(pr, top + height);
      ctx.stroke();
      ctx.setLineDash([]);
    }
    if (xa === null) continue;
    const a = clamp(u.valToPos(xa, "x", true)), b = clamp(pr);
    if (a === b) continue;
    ctx.beginPath();
    ctx.moveTo(a, y);
    ctx.lineTo(b, y);
    ctx.stroke();
    if (b !== pr) continue;
    ctx.beginPath();
    ctx.moveTo(pr, y);
    ctx.lineTo(pr + 6 * dpr, y - 4 * dpr);
    ctx.lineTo(pr + 6 * dpr, y + 4 * dpr);
    ctx.closePath();
    ctx.fill();
  }
  ctx.restore();
}

// Wall time of a step, from whichever loaded series has it (bucket ends included).
function stepTime(step) {
  for (const s of Object.values(state.series)) {
    const i = s.steps.indexOf(step);
    if (i >= 0) return s.times[i];
  }
  return null;
}

function alertNear(u, left) {
  for (const a of state.alerts) {
    const x = xOf(a.step, a.time);
    if (x !== null && Math.abs(u.valToPos(x, "x") - left) < 5) return a;
  }
  return null;
}

// What the cursor is on: an alert (and the rewind it caused), or a rewind's restart line.
function markTip(u, left) {
  const near = (x) => x !== null && x !== undefined && Math.abs(u.valToPos(x, "x") - left) < 5;
  const a = alertNear(u, left);
  const rewind = state.rewinds.find((r) => (a ? r.step === a.step : near(rewindXs(r)[1])));
  if (a) return `step ${a.step}: ${a.kind} — ${a.message}${rewind ? ` · ${rewind.label}` : ""}`;
  return rewind ? rewind.label : "";
}

function chartBox(panel) {
  const box = document.createElement("div");
  box.className = "chart";
  box.dataset.panel = panel.id;
  const tools = document.createElement("div");
  tools.className = "chart-tools";
  const log = Object.assign(document.createElement("button"), { type: "button", className: "log", textContent: "log y" });
  log.classList.toggle("on", state.logPanels.has(panel.id));
  log.addEventListener("click", () => {
    state.logPanels.has(panel.id) ? state.logPanels.delete(panel.id) : state.logPanels.add(panel.id);
    saveView();
    draw();
  });
  const range = state.zoom ? `&from=${state.zoom[0]}&to=${state.zoom[1]}` : "";
  const csv = Object.assign(document.createElement("a"), {
    className: "csv", textContent: "CSV", download: `${runName}-${panel.id}.csv`,
    href: api(`/csv?keys=${panel.keys.map(encodeURIComponent).join(",")}${range}`) });
  const png = Object.assign(document.createElement("button"), { type: "button", className: "png", textContent: "PNG" });
  png.addEventListener("click", () => downloadPng(state.charts[panel.id], `${runName}-${panel.id}`));
  const svg = Object.assign(document.createElement("button"), { type: "button", className: "svg", textContent: "SVG" });
  svg.addEventListener("click", () => downloadSvg(state.charts[panel.id], `${runName}-${panel.id}`, alertXs()));
  tools.append(log, csv, png, svg);
  const tip = document.createElement("div");
  tip.className = "alert-tip";
  box.append(tools, tip);
  return { box, tip };
}

function drawPanel(container, panel, width) {
  const { steps, data, series, bands } = chartData(panel);
  if (series.length < 2) return;
  const { box, tip } = chartBox(panel);
  container.append(box);
  const log = state.logPanels.has(panel.id);
  const fitFrom = state.yFrom !== null && state.xAxis === "step" ? state.yFrom : null;
  const chart = new uPlot({
    title: panel.title, width, height: 220, series, bands,
    scales: { x: { time: state.xAxis === "time" }, y: log ? { distr: 3 } : fitFrom !== null ? { range: rangeFrom(fitFrom) } : {} },
    axes: [{}, { size: 60, values: yTicks }],
    cursor: { drag: { x: true, y: false }, sync: { key: "hlat-run" } },
    hooks: {
      draw: panel.episodes ? [shadeEpisodes, alertMarkers, rewindMarkers] : [alertMarkers, rewindMarkers],
      setSelect: [(u) => {
        if (u.select.width < 5) return;
        const i0 = u.posToIdx(u.select.left), i1 = u.posToIdx(u.select.left + u.select.width);
        zoomTo(steps[Math.max(0, i0)], steps[Math.min(steps.length - 1, i1)]);
      }],
      setCursor: [(u) => {
        const text = u.cursor.left >= 0 ? markTip(u, u.cursor.left) : "";
        tip.textContent = text;
        tip.style.display = text ? "block" : "none";
      }],
    },
  }, data, box);
  state.charts[panel.id] = chart;
}

function draw() {
  const container = $("#charts");
  // Destroyed, not just dropped: the cursor sync group holds every chart it
  // has seen, and with it each one's data (a live page redraws many times a second).
  for (const chart of Object.values(state.charts)) chart.destroy();
  container.replaceChildren();
  state.charts = {};
  const width = Math.max(320, Math.floor(container.clientWidth / 2) - 24);
  for (const panel of panels()) {
    drawPanel(container, panel, width);
    if (panel.id === "loss") for (const p of evalPanels(state.evals)) drawEvalPanel(container, width, p, state);
  }
  for (const p of state.rankPanels) drawRankPanel(container, width, p, state.charts);
  if (!state.drawn) state.firstDrawMs = performance.now();  // since navigation start (bench/web_dashboard)
  state.drawn++;
}

function zoomTo(from, to) {
  if (from === undefined || to === undefined || to < from) return;
  state.zoom = [Math.max(0, from), to];
  saveView();
  load();
}

// The heatmaps: one request per vector key, as many buckets as the panel
// has pixel columns, over the zoomed range.
// (the section is hidden until its first draw: the page's width, not its own)
const heatmapWidth = () => Math.max(480, $("#charts").clientWidth - 8);
async function loadInternals() {
  const vectors = state.catalogue.vectors ?? [];
  const range = state.zoom ? { from: state.zoom[0], to: state.zoom[1] } : {};
  return vectors.length ? loadHeatmaps(api, vectors, { ...range, buckets: Math.min(2000, heatmapWidth()) }) : [];
}

function drawInternals() {
  $("#internals").hidden = !state.heatmaps.length;
  for (const chart of state.heatmapCharts) chart.destroy();
  state.heatmapCharts = drawHeatmaps($("#heatmaps"), state.heatmaps, {
    alerts: state.alerts, marked: state.marked, zoom: state.zoom, width: heatmapWidth(), onZoom: zoomTo });
  state.heatmapsDrawn = (state.heatmapsDrawn ?? 0) + 1;  // for the end-to-end test
}

// Live: the heatmaps are fetched again at most every 5 s while points arrive
// (the stream carries scalars; a heatmap's columns are re-bucketed anyway).
let internalsPending = null;
function internalsSoon() {
  if (internalsPending || state.zoom || !state.heatmaps.length) return;
  internalsPending = new Promise((resolve) => setTimeout(resolve, 5000))
    .then(loadInternals)
    .then((heatmaps) => {
      if (state.zoom) return;  // zoomed meanwhile: that load has drawn its own
      state.heatmaps = heatmaps;
      drawInternals();
    })
    .catch(() => {}).finally(() => { internalsPending = null; });
}

async function loadAlerts() {
  const { alerts, omitted } = await fetchJson(api("/alerts"));
  state.alerts = alerts;
  state.alertsOmitted = omitted;
  showAlerts();
}

// The rewinds come with the events (the uptime timeline's request).
function showRewinds(events) {
  state.rewinds = rewindsOf(events ?? []);
  showAlerts();
}

function showAlerts() {
  showAlertList($("#alerts"), {
    alerts: state.alerts, omitted: state.alertsOmitted, rewinds: state.rewinds, whyOpen: state.whyOpen,
    titleOf: (key) => (state.catalogue.vectors ?? []).find((v) => v.key === key)?.title ?? key,
    onStep: (a) => {
      const half = Math.max(25, Math.round(0.01 * Math.max(state.lastStep, 1)));
      zoomTo(a.step - half, a.step + half);
    },
    onWindow: (a) => {
      state.marked = a;
      zoomTo(a.data.flight_recorder.first_step, a.data.flight_recorder.last_step);
      $("#internals").scrollIntoView({ block: "start" });
    },
  });
}

async function loadEvals() {
  const { evals } = await fetchJson(api("/evals"));
  const changed = evals.length !== state.evals.length;
  state.evals = evals;
  return changed;
}

// The metric picker: every key of the run under its catalogue group, in the
// catalogue's order, the drawn ones ticked; hovering a key shows its title.
function showPicker() {
  const groups = new Map();
  const ordered = state.catalogue.panels.filter((p) => !p.per_rank).flatMap((p) => p.keys);
  for (const k of ordered) {
    const group = entryOf(k)?.group ?? "metrics";
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(k);
  }
  $("#picker-count").textContent = `${state.shown.size} of ${state.keys.length} metrics drawn`;
  $("#picker-groups").replaceChildren(...[...groups].map(([group, keys]) => {
    const fieldset = document.createElement("fieldset");
    fieldset.append(Object.assign(document.createElement("legend"), { textContent: group }));
    for (const k of keys) {
      const { title, unit } = entryOf(k) ?? {};
      const label = Object.assign(document.createElement("label"), { title: `${title ?? k}${unit ? ` (${unit})` : ""}` });
      const box = Object.assign(document.createElement("input"), { type: "checkbox", value: k, checked: state.shown.has(k) });
      box.addEventListener("change", () => {
        box.checked ? state.shown.add(k) : state.shown.delete(k);
        saveView();
        load().then(() => source && listen());
      });
      label.append(box, k);
      fieldset.append(label);
    }
    return fieldset;
  }));
}

function showHeader(run) {
  $("#run-name").textContent = run.name;
  showStatus(run.status);
  const par = run.config?.parallel;
  const layout = par && par.dp * par.tp > 1 ? ` · DP ${par.dp} × TP ${par.tp}${par.zero1 ? " (ZeRO-1)" : ""}` : "";
  state.lastStep = Math.max(state.lastStep, run.steps - 1);
  state.header = `${run.precision ? ` · ${run.precision}` : ""}${layout}`;
  showSteps();
  state.haltRoute = run.halt_route;
  showHaltButton(run.status);
  if (run.preflight) {  // a pre-flight has no steps: its tables, not charts
    document.body.classList.add("preflight-run");
    showPreflight(run.preflight, $("#preflight"));
  }
}

function showSteps() {
  $("#run-steps").textContent = `${(state.lastStep + 1).toLocaleString("en-US")} steps${state.header ?? ""}${state.cost ?? ""}`;
}

// Cost per 4M tokens at the median tokens/s drawn, every rank billed at the
// run's price per rank-hour (run.price_per_rank_hour); nothing without a price.
function showCost(run) {
  const price = run.config?.run?.price_per_rank_hour;
  const tps = state.series.tokens_per_s?.line.filter((v) => v > 0).sort((a, b) => a - b);
  if (!(price > 0) || !tps?.length) return;
  const ranks = (run.config?.parallel?.dp ?? 1) * (run.config?.parallel?.tp ?? 1);
  const cpt = (price * ranks / 3600) * 4e6 / tps[Math.floor(tps.length / 2)];
  state.cost = ` · CPT ${cpt.toPrecision(3)} per 4M tokens`;
  showSteps();
}

function showStatus(status) {
  state.status = status;
  $("#run-status").textContent = status;
  $("#run-status").className = `status ${status}`;
  // Live only while the stream is open and the run is running.
  $("#live").classList.toggle("on", state.streaming && status === "running");
  $("#live").textContent = status === "running" ? "live" : status;
}

// The halt button says what a halt would do for this kind of run (hlat's own
// trainer, the Python client, `ingest --follow --on-halt`), and is off for a
// run that nothing here can stop (a log imported once).
function showHaltButton(status) {
  const button = $("#halt");
  const route = state.haltRoute;
  button.disabled = status !== "running" || !route;
  button.title = status !== "running" ? `the run is ${status}`
    : route ? `On halt, ${route}.`
    : "Nothing here can stop this run: it is imported from a log. Halt its trainer by hand, " +
      "or follow the log with `hlat ingest --follow --on-halt`.";
}

// Everything the charts need, for the whole run or the zoomed range. Loads
// overlap (a re-bucketing load, a picked key, a zoom): one that a later load
// has overtaken drops what it fetched, or it would put back an older set of
// keys and range over the newer one.
let loadsStarted = 0;
async function load() {
  const ticket = ++loadsStarted;
  const overtaken = () => ticket !== loadsStarted;
  try {
    const { runs } = await fetchJson("/api/v1/runs");
    const run = runs.find((r) => r.name === runName);
    if (!run) throw new Error(`no run named "${runName}"`);
    showHeader(run);
    const catalogue = await fetchJson(api("/keys"));
    if (overtaken()) return;
    state.catalogue = catalogue;
    state.keys = catalogue.keys;
    if (!state.shown) {
      const asked = params.get("keys");
      // A run none of whose keys the catalogue draws by default (another
      // trainer's own names) still opens on charts: its first few keys.
      const defaults = state.keys.filter(isDefault);
      state.shown = new Set(asked ? asked.split(",").filter((k) => state.keys.includes(k))
                                  : defaults.length ? defaults : state.keys.slice(0, 8));
    }
    showPicker();
    const width = Math.max(320, Math.floor($("#charts").clientWidth / 2) - 24);
    const range = state.zoom ? { from: state.zoom[0], to: state.zoom[1] } : {};
    const wanted = [...new Set(["tokens_seen", ...state.shown])].filter((k) => state.keys.includes(k));
    const loaded = await Promise.all(wanted.map((k) => loadSeries(runBase, k, { ...range, width })));
    if (overtaken()) return;
    if (!state.zoom) for (const s of loaded) carryLivePoints(state.series[s.key], s);
    state.series = Object.fromEntries(loaded.map((s) => [s.key, s]));
    showCost(run);
    const tok = state.series.tokens_seen;
    if (tok && tok.steps.length) state.tokensPerStep = tok.line.at(-1) / (tok.steps.at(-1) + 1);
    const q = state.zoom ? `&from=${state.zoom[0]}&to=${state.zoom[1]}` : "";
    // Spike episodes of the key a drawn panel shades (grad norm's, in the catalogue).
    const shade = panels().find((p) => p.episodes && state.shown.has(p.episodes))?.episodes;
    const episodes = shade ? (await fetchJson(api(`/episodes?key=${encodeURIComponent(shade)}${q}`))).episodes : [];
    if (overtaken()) return;
    state.episodes = episodes;
    const [, , , heatmaps] = await Promise.all([loadAlerts(), loadUptime(api, run.status).then(showRewinds), loadEvals(), loadInternals(),
                       run.preflight ? null : loadRankPanels(api, state.catalogue.panels).then((p) => { state.rankPanels = p; })]);
    draw();
    if (!overtaken()) {
      state.heatmaps = heatmaps;
      drawInternals();
    }
    if (state.loadFailed) $("#message").textContent = "";  // other messages (a halt's answer) stay
    state.loadFailed = false;
  } catch (e) {
    if (overtaken()) return;
    state.loadFailed = true;
    $("#message").textContent = `Cannot load the run: ${e.message}`;
  }
}

// Points that arrived live while a load was in flight, after its last step.
function carryLivePoints(old, fresh) {
  if (!old) return;
  const last = fresh.steps.length ? fresh.steps.at(-1) : -1;
  for (let i = 0; i < old.steps.length; i++) {
    if (old.steps[i] <= last) continue;
    fresh.steps.push(old.steps[i]); fresh.line.push(old.line[i]);
    fresh.min.push(old.min[i]); fresh.max.push(old.max[i]); fresh.times.push(old.times[i]);
  }
}

// Live points fold into buckets as wide as the loaded ones; once the run has
// grown so much that a series holds far more buckets than the chart has
// pixels, it is fetched again as wider buckets (at most every few seconds).
let rebucketing = null;
function rebucketSoon() {
  if (rebucketing) return;
  rebucketing = new Promise((resolve) => setTimeout(resolve, 3000)).then(load).finally(() => { rebucketing = null; });
}

// Live: new points, alerts and status arrive as events. Appended to the
// series as points (the next load turns them into buckets again).
// Opened again when the picker shows a key the stream does not carry yet.
let source = null;
let streamed = new Set();
state.streamedKeys = () => [...streamed];  // for the end-to-end test
state.load = () => load();                 // likewise
function listen() {
  // The default view's keys and whatever the picker shows (custom keys included).
  const keys = [...new Set([...state.keys.filter(isDefault), ...(state.shown ?? []), "tokens_seen"])];
  if (source && keys.every((k) => streamed.has(k))) return;
  source?.close();
  streamed = new Set(keys);
  source = new EventSource(api(`/stream?keys=${encodeURIComponent(keys.join(","))}` +
                                     `&after=${Math.max(state.lastStep, -1)}`));
  source.addEventListener("open", () => { state.streaming = true; showStatus(state.status); });
  source.addEventListener("error", () => { state.streaming = false; showStatus(state.status); });
  source.addEventListener("points", (e) => {
    const { key, points } = JSON.parse(e.data);
    for (const [step] of points) state.lastStep = Math.max(state.lastStep, step);
    showSteps();
    internalsSoon();
    const s = state.series[key];
    if (!s || !state.shown.has(key)) return;
    for (const [step, value, time] of points) {
      if (state.zoom && step > state.zoom[1]) continue;
      appendLive(s, step, value, time);
    }
    if (s.steps.length > 4 * $("#charts").clientWidth) rebucketSoon();
    scheduleDraw();
  });
  source.addEventListener("alert", () => loadAlerts().then(() => { scheduleDraw(); drawInternals(); }));
  source.addEventListener("status", (e) => {
    const { status } = JSON.parse(e.data);
    showStatus(status);
    showHaltButton(status);
    loadUptime(api, status).then((events) => { showRewinds(events); scheduleDraw(); }).catch(() => {});
  });
}

let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

function controls() {
  $("#x-axis").value = state.xAxis;
  $("#smoothing").value = state.smoothing;
  $("#smoothing-value").textContent = state.smoothing.toFixed(2);
  $("#y-from").value = state.yFrom ?? "";
  $("#x-axis").addEventListener("change", (e) => { state.xAxis = e.target.value; saveView(); draw(); });
  $("#smoothing").addEventListener("input", (e) => {
    state.smoothing = Number(e.target.value);
    $("#smoothing-value").textContent = state.smoothing.toFixed(2);
    saveView();
    draw();
  });
  $("#y-from").addEventListener("change", (e) => {
    state.yFrom = e.target.value === "" ? null : Number(e.target.value);
    saveView();
    draw();
  });
  $("#reset-zoom").addEventListener("click", () => { state.zoom = null; state.marked = null; saveView(); load(); });
  $("#halt").addEventListener("click", async () => {
    if (!confirm(`Halt run "${runName}"? ${$("#halt").title}`)) return;
    const token = prompt("Access token (printed by `hlat serve` at start):");
    if (token === null) return;
    try {
      const body = await fetchJson(api("/halt"), { method: "POST", headers: { "X-HLAT-Token": token } });
      $("#message").textContent = `Halt requested: ${body.halt}`;
    } catch (e) {
      $("#message").textContent = `Halt refused: ${e.message}`;
    }
  });
}

if (!runName) {
  $("#message").textContent = "No run given: open this page from the runs list.";
} else {
  document.title = `hlat · ${runName}`;
  controls();
  load().then(() => { saveView(); listen(); });
  // Evaluations come from another process (`hlat eval --watch`), often after
  // training has ended: looked for every 10 s, with the store's health.
  showStoreHealth($("#store-health"));
  setInterval(() => {
    showStoreHealth($("#store-health"));
    loadEvals().then((changed) => changed && scheduleDraw()).catch(() => {});
  }, 10000);
}
