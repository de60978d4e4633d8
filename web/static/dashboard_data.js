// What the run page fetches, and the live stream that keeps it current:
// the run's record and keys, the series shown (as envelopes at the charts'
// width, over the zoomed range), spike episodes, alerts, events (the uptime
// timeline), evaluations, heatmaps and per-rank panels, all at once; then
// points, alerts and status changes as the run's event stream sends them.
import { fetchJson, loadSeries, appendLive, carryLive } from "./series.js";
import { loadUptime } from "./uptime.js";
import { loadRankPanels } from "./rank_panels.js";
import { rewindsOf } from "./attribution.js";
import { showPicker } from "./picker.js";
import { chartWidth } from "./chart_layout.js";
import { say, unsay } from "./messages.js";
import { timesProblem } from "./x_axis.js";
import { $, api, runBase, runName, params, state, entryOf, isDefault, panels, saveView, zoomLoadsWith } from "./dashboard_state.js";
import { draw, scheduleDraw } from "./dashboard_charts.js";
import { showHeader, refreshHeader, showSteps, showCost } from "./dashboard_header.js";
import { setAlerts, loadAlerts, showRewinds } from "./dashboard_alerts.js";
import { loadInternals, drawInternals, internalsSoon } from "./dashboard_internals.js";

// Evaluations come from another process (`hlat eval --watch`); whether a
// new one arrived, so the caller redraws only then.
export async function loadEvals() {
  const { evals } = await fetchJson(api("/evals"));
  const changed = evals.length !== state.evals.length;
  state.evals = evals;
  return changed;
}

// The metric picker: a key ticked or unticked is fetched (and streamed) at once.
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
export async function load() {
  const ticket = ++loadsStarted;
  const overtaken = () => ticket !== loadsStarted;
  try {
    // The runs list and the run's keys at once: the keys need only the run's name (a round trip saved).
    const [{ runs }, catalogue] = await Promise.all([fetchJson("/api/v1/runs"), fetchJson(api("/keys")).catch((e) => e)]);
    state.conn.heard();
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
    show(run, loaded, episodes, alerts, events, heatmaps);
  } catch (e) {
    if (overtaken()) return;
    state.loadFailed = true;
    if (e instanceof TypeError) state.conn.doubt();  // no answer at all: is the server there?
    say($("#load-message"), `Cannot load the run: ${e.message}`, "error");
  }
}
zoomLoadsWith(load);
state.load = () => load();  // for the end-to-end test

// What a load fetched, into the state and onto the page.
function show(run, loaded, episodes, alerts, events, heatmaps) {
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
export function listen(fresh = false) {
  // The default view's keys and whatever the picker shows (custom keys included).
  const keys = [...new Set([...state.keys.filter(isDefault), ...(state.shown ?? []), "tokens_seen"])];
  if (!fresh && source && keys.every((k) => streamed.has(k))) return;
  source?.close();
  streamed = new Set(keys);
  source = new EventSource(api(`/stream?keys=${encodeURIComponent(keys.join(","))}` +
                                     `&after=${Math.max(state.lastStep, -1)}`));
  const heard = () => state.conn.heard();
  source.addEventListener("open", () => { state.streaming = true; heard(); refreshHeader(); });
  source.addEventListener("error", () => { state.streaming = false; refreshHeader(); state.conn.doubt(); });
  source.addEventListener("points", (e) => { heard(); livePoints(JSON.parse(e.data)); });
  source.addEventListener("alert", () => { heard(); loadAlerts().then(() => { scheduleDraw(); drawInternals(); }); });
  source.addEventListener("status", (e) => {
    heard();
    state.status = JSON.parse(e.data).status;
    refreshHeader();
    loadUptime(api, state.status).then((events) => { showRewinds(events); scheduleDraw(); }).catch(() => {});
  });
}

// A stream event's points of one key: the step count moves for every key,
// a shown series takes them (within the zoomed range) and is drawn again.
function livePoints({ key, points }) {
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
}

// While the server does not answer, the browser's own reconnecting is
// stopped: connection.js asks, and listen(true) opens the stream again.
export function closeStream() {
  source?.close();
  source = null;
  state.streaming = false;
  refreshHeader();
}
