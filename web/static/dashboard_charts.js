// The run page's charts: one uPlot chart per panel, the envelopes of its
// keys (each bucket's min..max as a band, its mean as the line, so a
// one-step event shows at any zoom), with the alert episodes, non-finite
// values, shaded grad-norm spikes and rewinds drawn over them
// (chart_marks.js) and a hover tip that reads a bucket's min, max and last
// value (hover.js). Evaluations and a distributed run's per-rank panels
// are drawn among them. Everything is drawn again from the state on each
// change: a live page batches its redraws to one a frame (scheduleDraw).
import { COLORS, envelopeParts, nonFiniteOf, yTicks, rangeFrom, logRange, logSplits, logTicks } from "./series.js";
import { chartSvg } from "./chart_export.js";
import { chartBox } from "./chart_tools.js";
import { evalPanels, drawEvalPanel } from "./eval_panels.js";
import { drawRankPanel } from "./rank_panels.js";
import { episodeMarks, nonFiniteMarks, shadeSpikes, spikesToShade, rewindMarks, markTip } from "./chart_marks.js";
import { hoverLines, showHoverTip } from "./hover.js";
import { chartHeight, chartWidth, resizable } from "./chart_layout.js";
import { axisFor, timeAt } from "./x_axis.js";
import { $, api, runName, state, panels, saveView, zoomTo } from "./dashboard_state.js";

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

// A step's x on the axis drawn: the tokens seen by its end, its wall time
// (looked up in the loaded series when not given), or the step itself.
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

// Where each alert episode starts, on the axis drawn: an exported chart
// (PNG, SVG) carries these marks too.
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

// Every chart again, from the state: the panels shown, on the axis drawn.
let unwatch = [];  // what stops each drawn chart's resize watch
export function draw() {
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

// Checkpoint evaluations (eval_panels.js), drawn where draw() puts them.
const drawEvals = (container, width) => {
  for (const p of evalPanels(state.evals)) drawEvalPanel(container, width, p, state, chartHeight(`eval:${p.title}`));
};

// Points arrive many times a second on a live run: one draw a frame.
let drawPending = false;
export function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

// The spike episodes to shade (chart_marks.js spikesToShade): of the key a
// drawn panel shades, those an alert episode touches or the threshold picks.
export const shadedSpikes = () => spikesToShade(state.episodes, state.alertEpisodes,
                                          state.series[panels().find((p) => p.episodes)?.episodes], state.shadeRatio);
