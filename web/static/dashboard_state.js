// The run page's view state: which run, what is drawn and how (keys, zoom,
// smoothing, x axis, log panels, the y fit, columns, the shading threshold),
// and what the page has loaded. The URL holds the view, so a link restores
// it. The other dashboard_*.js modules read and write this one object; it
// needs none of them.
import { initialColumns } from "./chart_layout.js";

export const params = new URLSearchParams(location.search);
export const runName = params.get("run");
export const runBase = `/api/v1/runs/${encodeURIComponent(runName)}`;
export const api = (path) => `${runBase}${path}`;
export const $ = (sel) => document.querySelector(sel);

// Exposed for the end-to-end test and for poking at from the console.
export const state = (window.hlatDashboard = {
  keys: [],          // every key the run has
  catalogue: { metrics: {}, rank_metrics: {}, panels: [] },  // the run's keys as the catalogue sees them
  shown: null,       // keys drawn (Set); null until the keys are known
  series: {},        // key -> loadSeries() result
  alerts: [],
  alertsTotal: 0,    // the run's alerts, all of them
  alertsOmitted: 0,  // earlier alerts the server left out of its list
  alertEpisodes: [], // the newest alerts as the server groups them: what the charts mark and the list shows
  episodesTotal: 0,  // the run's episodes, all of them (the server lists the newest 1,000)
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
  conn: null,        // whether the server answers (connection.js; dashboard.js makes it)
});

// The charts come from the server's metric catalogue (GET .../keys: each key's
// title, unit, group and panel, and the panels the run's keys make, in
// order), so every key the run has is drawable and a new one needs no list
// here. The default view: the keys whose entry is `shown`, and evaluation
// metrics (llm.c's HellaSwag accuracy, an "eval/..." key): a score a run
// has is what its reader looks for first.
export const entryOf = (key) => state.catalogue.metrics[key];
const EVAL_NAME = /(^|[/_.-])(evals?|hellaswag|mmlu|arc|piqa|winogrande|lambada|boolq)([/_.-]|$)/i;
export const isDefault = (key) => Boolean(entryOf(key)?.shown) || entryOf(key)?.group === "eval" || EVAL_NAME.test(key);

// The view in the URL: run, drawn keys (when not the default), zoom,
// smoothing, x axis, log-scale panels, the y fit, columns, the shading threshold.
export function saveView() {
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
export function panels() {
  const out = [];
  for (const p of state.catalogue.panels) {
    if (p.per_rank) continue;
    const keys = p.keys.filter((k) => state.shown.has(k));
    if (keys.length) out.push({ id: p.id, title: p.title, keys, episodes: p.shade || null });
  }
  return out;
}

// A zoom changes what is fetched, so it ends in a load; dashboard_data.js
// hands its load() over here, so the charts, the alert list and the
// heatmaps can zoom without importing the module that draws them.
let reload = () => {};
export const zoomLoadsWith = (load) => { reload = load; };

export function zoomTo(from, to) {
  if (from === undefined || to === undefined || to < from) return;
  state.zoom = [Math.max(0, from), to];
  saveView();
  reload();
}

export function resetZoom() {
  state.zoom = null;
  state.marked = null;
  saveView();
  reload();
}
state.zoomTo = (from, to) => (from === null ? resetZoom() : zoomTo(from, to));  // for the end-to-end test
