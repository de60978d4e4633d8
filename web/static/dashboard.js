// A run's dashboard: one uPlot chart per panel, fed by the JSON API and kept
// live by the run's event stream. Downsampled series are envelopes (each
// bucket's min..max as a band, its mean as the line), so a one-step event is
// visible at any zoom, and hovering reads a bucket's min, max and last value
// (hover.js). A NaN or an infinity is never drawn over: the line breaks, a
// mark names it and a band runs from the first one on (chart_marks.js).
// Alerts are grouped into episodes (alert_episodes.js): one mark per episode
// on every chart and one line in the list, which zooms to it; grad-norm
// spike episodes are shaded where an alert or the threshold says so. The
// header says when the run diverged and when the server stopped answering
// (run_header.js, connection.js). Statistics over layers, heads and tensors
// are heatmaps below the charts (heatmaps.js); an alert with a
// flight-recorder window zooms everything to it. An alert the trainer could
// attribute says why under it (attribution.js); a rewind_skip's rewind is
// drawn on the charts and listed with its alert. Every key the run has can
// be drawn (the metric picker, searchable); the URL holds the view, so a
// link restores it.
import { COLORS, fetchJson, loadSeries, appendLive, carryLive, envelopeParts, nonFiniteOf, yTicks, rangeFrom,
         logRange, logSplits, logTicks } from "./series.js";
import { chartSvg } from "./chart_export.js";
import { chartBox } from "./chart_tools.js";
import { evalPanels, drawEvalPanel } from "./eval_panels.js";
import { loadUptime } from "./uptime.js";
import { showPreflight } from "./preflight.js";
import { loadRankPanels, drawRankPanel } from "./rank_panels.js";
import { showStoreHealth } from "./store_health.js";
import { loadHeatmaps, drawHeatmaps } from "./heatmaps.js";
import { rewindsOf } from "./attribution.js";
import { showAlertList } from "./alert_list.js";
import { episodesOf } from "./alert_episodes.js";
import { episodeMarks, nonFiniteMarks, shadeSpikes, spikesToShade, rewindMarks, markTip } from "./chart_marks.js";
import { hoverLines, showHoverTip } from "./hover.js";
import { showPicker } from "./picker.js";
import { chartHeight, chartWidth, initialColumns, rememberColumns, resizable } from "./chart_layout.js";
import { connection } from "./connection.js";
import { divergedAt, showStatus as renderStatus, showHaltButton as renderHalt } from "./run_header.js";
import { say, unsay } from "./messages.js";
import { axisFor, timeAt, timesProblem } from "./x_axis.js";

const params = new URLSearchParams(location.search);
const runName = params.get("run");
const runBase = `/api/v1/runs/${encodeURIComponent(runName)}`;
const api = (path) => `${runBase}${path}`;
const $ = (sel) => document.querySelector(sel);

// The charts come from the server's metric catalogue (GET .../keys: each key's
// title, unit, group and panel, and the panels the run's keys make, in
// order), so every key the run has is drawable and a new one needs no list
// here. The default view: the keys whose entry is `shown`, and evaluation
// metrics (llm.c's HellaSwag accuracy, an "eval/..." key): a score a run
// has is what its reader looks for first.
const entryOf = (key) => state.catalogue.metrics[key];
const EVAL_NAME = /(^|[/_.-])(evals?|hellaswag|mmlu|arc|piqa|winogrande|lambada|boolq)([/_.-]|$)/i;
const isDefault = (key) => Boolean(entryOf(key)?.shown) || entryOf(key)?.group === "eval" || EVAL_NAME.test(key);

// Exposed for the end-to-end test and for poking at from the console.
const state = (window.hlatDashboard = {
  keys: [],          // every key the run has
  catalogue: { metrics: {}, rank_metrics: {}, panels: [] },  // the run's keys as the catalogue sees them
  shown: null,       // keys drawn (Set); null until the keys are known
  series: {},        // key -> loadSeries() result
  alerts: [],
  alertsOmitted: 0,  // earlier alerts the server left out of its list
  alertEpisodes: [], // the alerts grouped (alert_episodes.js): what the charts mark and the list shows
  episodesOpen: new Set(), // alert episodes whose alerts are open in the list
  rewinds: [],       // rewind_skip's rewinds, from the events (attribution.js rewindsOf)
  whyOpen: new Set(), // "kind@step" of the alerts whose "Why" is open (kept across redraws)
  episodes: [],      // [first, last, peak_step, peak] of grad-norm spikes (the server's)
  shaded: [],        // those drawn: an alert or the threshold says so
  shadeRatio: params.has("shade") ? Number(params.get("shade")) : 2,  // a spike's peak over the level before it
  xAxis: params.get("x") || "step",  // the axis chosen
  axis: "step",      // the axis drawn (steps when the run cannot give the chosen one)
  timesProblem: "",  // why the run's wall times are not real ("" when they are)
  columns: initialColumns(params.get("cols")),
  smoothing: params.has("smooth") ? Number(params.get("smooth")) : 0.6,
  zoom: params.has("from") ? [Number(params.get("from")), Number(params.get("to"))] : null,
  logPanels: new Set((params.get("log") || "").split(",").filter(Boolean)),
  yFrom: params.has("yfrom") ? Number(params.get("yfrom")) : null,  // fit y to steps >= this
  charts: {},        // panel id -> uPlot
  tokensPerStep: null,
  lastStep: -1,
  status: null,
  divergedAt: null,  // [first, last] steps where loss or grad norm went non-finite for good (run_header.js divergedAt)
  evals: [],
  rankPanels: [],    // per-rank series of a distributed run (rank_panels.js)
  haltRoute: null,   // what a halt does for this run ("" when nothing here can stop it)
  drawn: 0,          // draws so far (the bench waits for the first)
  loadFailed: false, // the load message shows an error (cleared by the next good load)
  heatmaps: [],      // GET .../heatmap replies, one per vector key of the run
  heatmapCharts: [], // their uPlot lines (destroyed on each heatmap draw)
  marked: null,      // the alert whose flight-recorder window is shown
  bad: {},           // panel id -> its values that are not finite (series.js nonFiniteOf)
  hover: {},         // panel id -> the lines its hover tip shows (for the end-to-end test)
});
// Whether the server answers: the header and the Halt button follow it.
const conn = (state.conn = connection((up) => {
  refreshHeader();
  if (up) load().then(() => listen(true));
  else closeStream();
}));

// The view in the URL: run, drawn keys (when not the default), zoom,
// smoothing, x axis, log-scale panels, the y fit, columns, the shading threshold.
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
  if (state.columns !== 2) p.set("cols", state.columns);
  if (state.shadeRatio !== 2) p.set("shade", state.shadeRatio);
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

// The x axis drawn (x_axis.js), with the reason beside the choice when it
// is not the one chosen; wall time is not offered where the run has no real times.
function chooseAxis() {
  const { axis, reason } = axisFor(state.xAxis, state);
  state.axis = axis;
  $("#x-note").textContent = reason;
  $("#x-note").hidden = !reason;
  const time = $('#x-axis option[value="time"]');
  time.disabled = Boolean(state.timesProblem);
  time.textContent = state.timesProblem ? "wall time (no real times)" : "wall time";
  time.title = state.timesProblem ? `this run's ${state.timesProblem}` : "";
}

function xOf(step, time) {
  if (state.axis === "tokens") return (step + 1) * state.tokensPerStep;
  if (state.axis === "time") return time ?? timeAt(state.series, step);
  return step;
}

// What chart_marks.js reads.
const markView = {
  x: (step, time) => xOf(step, time),
  get episodes() { return state.alertEpisodes; },
  get shaded() { return state.shaded; },
  get rewinds() { return state.rewinds; },
  rewindXs(r) {
    if (state.axis === "time") return [null, r.time];
    const restart = r.restartedAt ?? r.atMost;
    return [xOf(r.step), restart === undefined || restart === null ? null : xOf(restart)];
  },
};

const episodeXs = () => state.alertEpisodes.map((e) => xOf(e.first_step)).filter((x) => x !== null);
state.svg = (panelId) => chartSvg(state.charts[panelId], episodeXs());  // for the end-to-end test

// uPlot data for a panel: x = the union of its keys' steps (as steps, tokens
// or time), then each key's envelope parts; `bad`: its keys' values that are
// not finite.
function chartData(panel) {
  const times = new Map();
  for (const k of panel.keys) state.series[k]?.steps.forEach((s, i) => times.set(s, state.series[k].times[i]));
  const steps = [...times.keys()].sort((a, b) => a - b).filter((s) => xOf(s, times.get(s)) !== null);
  const data = [steps.map((s) => xOf(s, times.get(s)))];
  const series = [{ label: state.axis }];
  const bands = [], bad = [];
  panel.keys.forEach((key, i) => {
    const s = state.series[key];
    if (!s || !s.steps.length) return;
    const parts = envelopeParts(s, steps, { color: COLORS[i % COLORS.length], smoothing: state.smoothing,
                                            log: state.logPanels.has(panel.id), offset: data.length });
    data.push(...parts.data);
    series.push(...parts.series);
    bands.push(...parts.bands);
    bad.push(...nonFiniteOf(s));
  });
  return { steps, data, series, bands, bad };
}

// Hover: the values under the cursor, and the alert episode or rewind it is on.
function hoverHooks(panel, steps, tip) {
  return [(u) => {
    const on = u.cursor.left >= 0;
    const [i0, i1] = on ? underCursor(u) : [null, null];
    const lines = i0 !== null ? hoverLines(panel.keys, (k) => state.series[k], steps[i0], steps[i1]) : [];
    state.hover[panel.id] = lines;
    showHoverTip(tip, u, lines, on ? markTip(u, u.cursor.left, markView) : "");
  }];
}

// The data indices within 1.5 px of the cursor (the one it snapped to at least).
function underCursor(u) {
  const idx = u.cursor.idx, xs = u.data[0];
  if (idx === null || idx === undefined) return [null, null];
  const lo = u.posToVal(u.cursor.left - 1.5, "x"), hi = u.posToVal(u.cursor.left + 1.5, "x");
  let i0 = idx, i1 = idx;
  while (i0 > 0 && xs[i0 - 1] >= lo) i0--;
  while (i1 < xs.length - 1 && xs[i1 + 1] <= hi) i1++;
  return [i0, i1];
}

function yScale(panel) {
  const fitFrom = state.yFrom !== null && state.axis === "step" ? state.yFrom : null;
  if (state.logPanels.has(panel.id)) return { distr: 3, range: logRange(fitFrom) };
  return fitFrom !== null ? { range: rangeFrom(fitFrom) } : {};
}

function drawPanel(container, panel, width) {
  const { steps, data, series, bands, bad } = chartData(panel);
  if (series.length < 2) return;
  state.bad[panel.id] = bad;
  const range = state.zoom ? `&from=${state.zoom[0]}&to=${state.zoom[1]}` : "";
  const { box, tip } = chartBox(panel, {
    log: state.logPanels.has(panel.id),
    onLog: () => {
      state.logPanels.has(panel.id) ? state.logPanels.delete(panel.id) : state.logPanels.add(panel.id);
      saveView();
      draw();
    },
    csvHref: api(`/csv?keys=${panel.keys.map(encodeURIComponent).join(",")}${range}`),
    fileName: `${runName}-${panel.id}`,
    chart: () => state.charts[panel.id],
    marks: episodeXs,
  });
  container.append(box);
  const log = state.logPanels.has(panel.id);
  // Log ticks: every split labelled (uPlot's own filter keeps decades only).
  const yAxis = log ? { size: 60, splits: logSplits, values: logTicks, filter: (u, splits) => splits } : { size: 60, values: yTicks };
  const chart = new uPlot({
    title: panel.title, width, height: chartHeight(panel.id), series, bands,
    scales: { x: { time: state.axis === "time" }, y: yScale(panel) },
    axes: [{}, yAxis],
    legend: { live: false },  // the hover tip reads the data; the legend names and toggles the lines
    cursor: { drag: { x: true, y: false }, sync: { key: "hlat-run" } },
    hooks: {
      draw: [(u) => nonFiniteMarks(u, bad, markView), ...(panel.episodes ? [(u) => shadeSpikes(u, markView)] : []),
             (u) => episodeMarks(u, markView), (u) => rewindMarks(u, markView)],
      setSelect: [(u) => {
        if (u.select.width < 5) return;
        const i0 = u.posToIdx(u.select.left), i1 = u.posToIdx(u.select.left + u.select.width);
        zoomTo(steps[Math.max(0, i0)], steps[Math.min(steps.length - 1, i1)]);
      }],
      setCursor: hoverHooks(panel, steps, tip),
    },
  }, data, box);
  state.charts[panel.id] = chart;
}

let unwatch = [];  // what stops each drawn chart's resize watch
function draw() {
  const container = $("#charts");
  // Destroyed, not just dropped: the cursor sync group holds every chart it
  // has seen, and with it each one's data (a live page redraws many times a second).
  for (const chart of Object.values(state.charts)) chart.destroy();
  for (const stop of unwatch) stop();
  unwatch = [];
  container.replaceChildren();
  state.charts = {};
  state.bad = {};
  chooseAxis();
  container.dataset.columns = state.columns;
  const width = chartWidth(container, state.columns);
  const all = panels();
  // Checkpoint evaluations beside the loss, or first when the run has no loss panel.
  const evalsAfter = all.some((p) => p.id === "loss") ? "loss" : null;
  if (!evalsAfter) drawEvals(container, width);
  for (const panel of all) {
    drawPanel(container, panel, width);
    if (panel.id === evalsAfter) drawEvals(container, width);
  }
  for (const p of state.rankPanels) drawRankPanel(container, width, p, state.charts, chartHeight(`rank:${p.key}`));
  for (const [id, u] of Object.entries(state.charts)) unwatch.push(resizable(u.root.parentElement, u, id));
  $("#shade-control").hidden = !all.some((p) => p.episodes);
  if (!state.drawn) state.firstDrawMs = performance.now();  // since navigation start (bench/web_dashboard)
  state.drawn++;
}

const drawEvals = (container, width) => {
  for (const p of evalPanels(state.evals)) drawEvalPanel(container, width, p, state, chartHeight(`eval:${p.title}`));
};

function resetZoom() {
  state.zoom = null;
  state.marked = null;
  saveView();
  load();
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
  // One line per alert episode, as on the charts (600 NaN alerts are not a red block), and the marked alert.
  const lines = state.alertEpisodes.filter((e) => e.severity !== "info").map((e) => ({ step: e.first_step, kind: e.kind }));
  state.heatmapCharts = drawHeatmaps($("#heatmaps"), state.heatmaps, {
    alerts: state.marked ? [...lines, state.marked] : lines, marked: state.marked, zoom: state.zoom, width: heatmapWidth(), onZoom: zoomTo });
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

const loadAlerts = async () => setAlerts(await fetchJson(api("/alerts")));
function setAlerts(reply) {
  state.alerts = reply.alerts;
  state.alertsOmitted = reply.omitted;
  state.alertEpisodes = episodesOf(reply);
  state.shaded = shadedSpikes();
  showAlerts();
  refreshHeader();
}

// The rewinds come with the events (the uptime timeline's request).
function showRewinds(events) {
  state.rewinds = rewindsOf(events ?? []);
  showAlerts();
}

function showAlerts() {
  const half = () => Math.max(25, Math.round(0.01 * Math.max(state.lastStep, 1)));
  showAlertList($("#alerts"), $("#alerts-summary"), {
    episodes: state.alertEpisodes, alerts: state.alerts, omitted: state.alertsOmitted, rewinds: state.rewinds,
    whyOpen: state.whyOpen, episodesOpen: state.episodesOpen,
    titleOf: (key) => (state.catalogue.vectors ?? []).find((v) => v.key === key)?.title ?? key,
    onStep: (a) => zoomTo(a.step - half(), a.step + half()),
    onRange: (first, last) => zoomTo(first - half(), last + half()),
    onWindow: (a) => {
      state.marked = a;
      zoomTo(a.data.flight_recorder.first_step, a.data.flight_recorder.last_step);
      $("#internals").scrollIntoView({ block: "start" });
    },
  });
}

const shadedSpikes = () => spikesToShade(state.episodes, state.alertEpisodes,
                                          state.series[panels().find((p) => p.episodes)?.episodes], state.shadeRatio);

async function loadEvals() {
  const { evals } = await fetchJson(api("/evals"));
  const changed = evals.length !== state.evals.length;
  state.evals = evals;
  return changed;
}

function pickerShows() {
  $("#picker-count").textContent = `${state.shown.size} of ${state.keys.length} metrics drawn`;
  showPicker($("#picker-groups"), $("#picker-filter"), {
    ordered: state.catalogue.panels.filter((p) => !p.per_rank).flatMap((p) => p.keys),
    groupOf: (k) => entryOf(k)?.group ?? "metrics",
    entryOf,
    shown: state.shown,
    onToggle: (k, on) => {
      on ? state.shown.add(k) : state.shown.delete(k);
      saveView();
      load().then(() => source && listen());
    },
  });
}

function showHeader(run) {
  $("#run-name").textContent = run.name;
  state.status = run.status;
  const par = run.config?.parallel;
  const layout = par && par.dp * par.tp > 1 ? ` · DP ${par.dp} × TP ${par.tp}${par.zero1 ? " (ZeRO-1)" : ""}` : "";
  state.lastStep = Math.max(state.lastStep, run.steps - 1);
  state.header = `${run.precision ? ` · ${run.precision}` : ""}${layout}`;
  showSteps();
  state.haltRoute = run.halt_route;
  refreshHeader();
  if (run.preflight) {  // a pre-flight has no steps: its tables, not charts
    document.body.classList.add("preflight-run");
    showPreflight(run.preflight, $("#preflight"));
  }
}

// The status (with where the run diverged) and the Halt button, from what
// the page knows now (run_header.js).
function refreshHeader() {
  if (state.status === "diverged") state.divergedAt = divergedAt(state.series, state.alertEpisodes, state.divergedAt, state.lastStep);
  renderStatus(state, conn);
  renderHalt(state, conn);
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

// The keys shown by default, the run's series at the charts' width.
async function loadShownSeries() {
  if (!state.shown) {
    const asked = params.get("keys");
    // A run none of whose keys the catalogue draws by default (another
    // trainer's own names) still opens on charts: its first few keys.
    const defaults = state.keys.filter(isDefault);
    state.shown = new Set(asked ? asked.split(",").filter((k) => state.keys.includes(k))
                                : defaults.length ? defaults : state.keys.slice(0, 8));
  }
  pickerShows();
  const width = chartWidth($("#charts"), state.columns);
  const range = state.zoom ? { from: state.zoom[0], to: state.zoom[1] } : {};
  const wanted = [...new Set(["tokens_seen", ...state.shown])].filter((k) => state.keys.includes(k));
  return Promise.all(wanted.map((k) => loadSeries(runBase, k, { ...range, width })));
}

// Spike episodes of the key a drawn panel shades (grad norm's, in the catalogue).
async function loadSpikes(range) {
  const shade = panels().find((p) => p.episodes && state.shown.has(p.episodes))?.episodes;
  return shade ? (await fetchJson(api(`/episodes?key=${encodeURIComponent(shade)}${range}`))).episodes : [];
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
    // The runs list and the run's keys at once: the keys need only the run's name (a round trip saved).
    const [{ runs }, catalogue] = await Promise.all([fetchJson("/api/v1/runs"), fetchJson(api("/keys")).catch((e) => e)]);
    conn.heard();
    const run = runs.find((r) => r.name === runName);
    if (!run) throw new Error(`no run named "${runName}"`);
    showHeader(run);
    if (catalogue instanceof Error) throw catalogue;
    if (overtaken()) return;
    state.catalogue = catalogue;
    state.keys = catalogue.keys;
    // Everything at once (the server answers a few at a time; no round trip waits on another).
    const q = state.zoom ? `&from=${state.zoom[0]}&to=${state.zoom[1]}` : "";
    const [loaded, episodes, alerts, events, , heatmaps] = await Promise.all([
      loadShownSeries(), loadSpikes(q), fetchJson(api("/alerts")), loadUptime(api, run.status), loadEvals(), loadInternals(),
      run.preflight ? null : loadRankPanels(api, state.catalogue.panels).then((p) => { state.rankPanels = p; })]);
    if (overtaken()) return;
    if (!state.zoom) for (const s of loaded) carryLive(state.series[s.key], s);
    state.series = Object.fromEntries(loaded.map((s) => [s.key, s]));
    if (!state.zoom) state.timesProblem = timesProblem(state.series);  // judged on the whole run
    showCost(run);
    const tok = state.series.tokens_seen;
    if (tok && tok.steps.length) state.tokensPerStep = tok.line.at(-1) / (tok.steps.at(-1) + 1);
    state.episodes = episodes;
    state.rewinds = rewindsOf(events ?? []);
    setAlerts(alerts);
    draw();
    refreshHeader();
    state.heatmaps = heatmaps;
    drawInternals();
    if (state.loadFailed) unsay($("#load-message"));  // a halt's answer, beside its button, stays
    state.loadFailed = false;
  } catch (e) {
    if (overtaken()) return;
    state.loadFailed = true;
    if (e instanceof TypeError) conn.doubt();  // no answer at all: is the server there?
    say($("#load-message"), `Cannot load the run: ${e.message}`, "error");
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
// Opened again when the picker shows a key the stream does not carry yet,
// and when the server answers again after it did not (`fresh`): from the
// last step seen, so no point comes twice.
let source = null;
let streamed = new Set();
state.streamedKeys = () => [...streamed];  // for the end-to-end test
state.load = () => load();                 // likewise
state.zoomTo = (from, to) => (from === null ? resetZoom() : zoomTo(from, to));
function listen(fresh = false) {
  // The default view's keys and whatever the picker shows (custom keys included).
  const keys = [...new Set([...state.keys.filter(isDefault), ...(state.shown ?? []), "tokens_seen"])];
  if (!fresh && source && keys.every((k) => streamed.has(k))) return;
  source?.close();
  streamed = new Set(keys);
  source = new EventSource(api(`/stream?keys=${encodeURIComponent(keys.join(","))}` +
                                     `&after=${Math.max(state.lastStep, -1)}`));
  const heard = () => conn.heard();
  source.addEventListener("open", () => { state.streaming = true; heard(); refreshHeader(); });
  source.addEventListener("error", () => { state.streaming = false; refreshHeader(); conn.doubt(); });
  source.addEventListener("points", (e) => {
    heard();
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
  source.addEventListener("alert", () => { heard(); loadAlerts().then(() => { scheduleDraw(); drawInternals(); }); });
  source.addEventListener("status", (e) => {
    heard();
    state.status = JSON.parse(e.data).status;
    refreshHeader();
    loadUptime(api, state.status).then((events) => { showRewinds(events); scheduleDraw(); }).catch(() => {});
  });
}

// While the server does not answer, the browser's own reconnecting is
// stopped: connection.js asks, and listen(true) opens the stream again.
function closeStream() {
  source?.close();
  source = null;
  state.streaming = false;
  refreshHeader();
}

let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

function controls() {
  $("#x-axis").value = state.xAxis;
  $("#columns").value = String(state.columns);
  $("#smoothing").value = state.smoothing;
  $("#smoothing-value").textContent = state.smoothing.toFixed(2);
  $("#y-from").value = state.yFrom ?? "";
  $("#shade-ratio").value = state.shadeRatio;
  const redraw = () => { saveView(); draw(); };
  $("#x-axis").addEventListener("change", (e) => { state.xAxis = e.target.value; redraw(); });
  $("#columns").addEventListener("change", (e) => {
    state.columns = Number(e.target.value);
    rememberColumns(state.columns);
    redraw();
  });
  $("#smoothing").addEventListener("input", (e) => {
    state.smoothing = Number(e.target.value);
    $("#smoothing-value").textContent = state.smoothing.toFixed(2);
    redraw();
  });
  $("#y-from").addEventListener("change", (e) => {
    state.yFrom = e.target.value === "" ? null : Number(e.target.value);
    redraw();
  });
  $("#shade-ratio").addEventListener("change", (e) => {
    const ratio = Number(e.target.value);
    if (!(ratio >= 1)) return void (e.target.value = state.shadeRatio);
    state.shadeRatio = ratio;
    state.shaded = shadedSpikes();
    redraw();
  });
  $("#reset-zoom").addEventListener("click", resetZoom);
  $("#halt").addEventListener("click", halt);
}

// A halt's answer stays beside the button until dismissed.
async function halt() {
  if (!confirm(`Halt run "${runName}"? ${$("#halt").title}`)) return;
  const token = prompt("Access token (printed by `hlat serve` at start):");
  if (token === null) return;
  try {
    const body = await fetchJson(api("/halt"), { method: "POST", headers: { "X-HLAT-Token": token } });
    say($("#halt-message"), `Halt requested: ${body.halt}`, "ok");
  } catch (e) {
    if (e instanceof TypeError) conn.doubt();
    say($("#halt-message"), `Halt refused: ${e.message}`, "error");
  }
}

if (!runName) {
  say($("#load-message"), "No run given: open this page from the runs list.", "error");
} else {
  document.title = `hlat · ${runName}`;
  controls();
  load().then(() => { saveView(); listen(); });
  // Evaluations come from another process (`hlat eval --watch`), often after
  // training has ended: looked for every 10 s, with the store's health; the
  // same tick asks whether the server is still there (a finished run's
  // stream is quiet).
  showStoreHealth($("#store-health"));
  setInterval(() => {
    conn.doubt();
    if (!conn.connected) return;
    showStoreHealth($("#store-health"));
    loadEvals().then((changed) => changed && scheduleDraw()).catch(() => {});
  }, 10000);
}
