// A run's dashboard: one uPlot chart per panel, fed by the JSON API
// (downsampled to the chart's pixel width; full resolution when zoomed) and
// kept live by the run's event stream. Alerts are red markers on every chart.
// Checkpoint evaluations (`hlat eval --watch`) follow the loss, against tokens
// seen, with a band of one standard error.
const params = new URLSearchParams(location.search);
const runName = params.get("run");
const api = (path) => `/api/v1/runs/${encodeURIComponent(runName)}${path}`;
const $ = (sel) => document.querySelector(sel);

// Panels: a title and the metric keys drawn on it.
const PANELS = [
  { title: "loss", keys: ["loss", "heldout_loss"] },
  { title: "grad norm (before clipping)", keys: ["grad_norm"], spikeBand: true },
  { title: "param norm", keys: ["param_norm"] },
  { title: "learning rate", keys: ["lr"] },
  { title: "tokens/s", keys: ["tokens_per_s"] },
  { title: "MFU", keys: ["mfu"] },
  { title: "step time split (s)", keys: ["data_s", "forward_s", "backward_s", "optimizer_s"] },
  // Distributed runs only (a panel without data is not drawn). Checks come
  // every parallel.check_every steps: drawn as measured, never smoothed.
  { title: "communication (s): DP gradients (total, exposed), TP all-reduces",
    keys: ["comm_s", "comm_exposed_s", "tp_comm_s"] },
  { title: "TP drift of replicated norm weights: max |w − w(tp rank 0)|", keys: ["tp_drift", "tp_drift_rel"], raw: true },
  { title: "replica consistency: DP ranks whose hash differs (0 = all agree)",
    keys: ["replica_mismatch", "replica_grad_mismatch"], raw: true },
];
const COLORS = ["#1f6feb", "#d4770c", "#2da44e", "#8250df", "#cf222e"];

// Exposed for the end-to-end test and for poking at from the console.
const state = (window.hlatDashboard = {
  series: {},        // key -> {steps: [], values: [], max: []}
  alerts: [],
  xAxis: "step",
  smoothing: 0.6,
  zoom: null,        // [from, to] in steps, or null for the whole run
  charts: [],
  tokensPerStep: null,
  times: {},         // step -> wall time, from the loss series
  evals: [],         // {step, tokens, task, metric, value} from /evals
  haltRoute: null,   // what a halt does for this run ("" when nothing here can stop it)
});

function ema(values, alpha) {
  if (alpha <= 0) return values;
  let acc = null;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    acc = acc === null ? v : alpha * acc + (1 - alpha) * v;
    return acc;
  });
}

// Running mean of the previous 20 values + 0.1: the paper's spike threshold.
function spikeThreshold(values) {
  const out = [];
  for (let i = 0; i < values.length; i++) {
    const window = values.slice(Math.max(0, i - 20), i).filter(Number.isFinite);
    out.push(window.length ? window.reduce((a, b) => a + b, 0) / window.length + 0.1 : null);
  }
  return out;
}

async function fetchJson(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function loadSeries(key, width) {
  const range = state.zoom ? `&from=${state.zoom[0]}&to=${state.zoom[1]}` : "";
  const zoomedSpan = state.zoom ? state.zoom[1] - state.zoom[0] + 1 : Infinity;
  const full = zoomedSpan <= width * 2;
  const body = await fetchJson(api(`/series?key=${encodeURIComponent(key)}${range}${full ? "" : `&points=${width}`}`));
  const s = { steps: [], values: [], max: [], times: [] };
  if (body.points) {
    for (const [step, value, time] of body.points) {
      s.steps.push(step); s.values.push(value); s.max.push(value); s.times.push(time);
    }
  } else {
    for (const [, last, , max, value] of body.buckets) {
      s.steps.push(last); s.values.push(value); s.max.push(max); s.times.push(null);
    }
  }
  return s;
}

function xValues(steps) {
  if (state.xAxis === "tokens" && state.tokensPerStep) return steps.map((s) => (s + 1) * state.tokensPerStep);
  if (state.xAxis === "time") return steps.map((s) => state.times[s] ?? null);
  return steps;
}

// uPlot wants one x array per chart: the union of the keys' steps.
function chartData(panel) {
  const steps = [...new Set(panel.keys.flatMap((k) => state.series[k]?.steps ?? []))].sort((a, b) => a - b);
  const data = [xValues(steps)];
  const series = [{ label: state.xAxis }];
  panel.keys.forEach((key, i) => {
    const s = state.series[key];
    if (!s || !s.steps.length) return;
    const byStep = new Map(s.steps.map((step, j) => [step, j]));
    const raw = steps.map((step) => (byStep.has(step) ? s.values[byStep.get(step)] : null));
    const color = COLORS[i % COLORS.length];
    if (panel.spikeBand) {
      const max = steps.map((step) => (byStep.has(step) ? s.max[byStep.get(step)] : null));
      const threshold = spikeThreshold(raw);
      // Spike episodes: runs of steps above the threshold, shaded on the chart.
      state.episodes = [];
      for (let j = 0; j < steps.length; j++) {
        if (!(raw[j] > threshold[j])) continue;
        const start = j;
        while (j + 1 < steps.length && raw[j + 1] > threshold[j + 1]) j++;
        state.episodes.push([steps[start], steps[j]]);
      }
      data.push(max, threshold);
      series.push({ label: `${key} (max in bucket)`, stroke: color, width: 1, spanGaps: true },
                  { label: "spike threshold (mean of 20 + 0.1)", stroke: "#999", dash: [4, 4], width: 1, spanGaps: true });
    } else if (panel.raw) {
      data.push(raw);
      series.push({ label: key, stroke: color, width: 2, spanGaps: true, points: { show: true, size: 4 } });
    } else {
      data.push(raw);
      series.push({ label: `${key} (raw)`, stroke: color + "44", width: 1, spanGaps: true });
      data.push(ema(raw, state.smoothing));
      series.push({ label: key, stroke: color, width: 2, spanGaps: true });
    }
  });
  return { data, series };
}

// Axis labels that stay readable from 3e-5 (a learning rate) to 1e6 (tokens),
// with as many decimals as the spacing between ticks needs (a param norm
// moving from 12.95 to 12.99 must not read 13, 13, 13).
function tick(v, incr) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-2) return v.toExponential(1);
  if (incr > 0) return v.toFixed(Math.min(6, Math.max(0, Math.ceil(-Math.log10(incr)))));
  return Number(v.toPrecision(3)).toString();
}
const yTicks = (u, vals, axis, space, incr) => vals.map((v) => tick(v, incr));

function spikeEpisodes(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = "rgba(212, 119, 12, 0.12)";
  for (const [a, b] of state.episodes ?? []) {
    const [xa, xb] = xValues([a, b]);
    if (xa === null || xa === undefined) continue;
    const left = u.valToPos(xa, "x", true), right = Math.max(u.valToPos(xb, "x", true), left + 2);
    ctx.fillRect(left, u.bbox.top, right - left, u.bbox.height);
  }
  ctx.restore();
}

function alertMarkers(u) {
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = "#cf222e";
  ctx.lineWidth = 2 * devicePixelRatio;
  for (const a of state.alerts) {
    const [x] = xValues([a.step]);
    if (x === null || x === undefined) continue;
    const px = u.valToPos(x, "x", true);
    if (px < u.bbox.left || px > u.bbox.left + u.bbox.width) continue;
    ctx.beginPath();
    ctx.moveTo(px, u.bbox.top);
    ctx.lineTo(px, u.bbox.top + u.bbox.height);
    ctx.stroke();
  }
  ctx.restore();
}

function alertAt(u, left) {
  for (const a of state.alerts) {
    const [x] = xValues([a.step]);
    if (x !== null && x !== undefined && Math.abs(u.valToPos(x, "x") - left) < 5) return a;
  }
  return null;
}

// Eval panels: bits per byte of every perplexity task, then each task's
// accuracies (with its chance level dashed), then the gold answers' mean
// log-probability. The trainer's own held-out loss is on the loss panel.
function evalPanels() {
  const byTask = new Map();
  for (const e of state.evals) {
    if (e.task === "heldout") continue;
    if (!byTask.has(e.task)) byTask.set(e.task, new Map());
    const metrics = byTask.get(e.task);
    if (!metrics.has(e.metric)) metrics.set(e.metric, new Map());
    metrics.get(e.metric).set(e.tokens, e.value);
  }
  const panels = [];
  const add = (title, lines) => { if (lines.length) panels.push({ title, lines }); };
  const line = (task, metric, label, dashed = false) =>
    byTask.get(task)?.has(metric) ? [{ task, metric, label, dashed }] : [];
  add("held-out bits per byte (checkpoints)", [...byTask.keys()].flatMap((t) => line(t, "bits_per_byte", t)));
  for (const task of byTask.keys()) {
    add(`${task}: accuracy`, [...line(task, "acc", "acc"), ...line(task, "acc_norm", "acc_norm"),
                               ...line(task, "acc_mutual_info", "acc_mutual_info"), ...line(task, "chance", "chance", true)]);
  }
  add("gold answer log-prob per token", [...byTask.keys()].flatMap((t) => line(t, "gold_logprob", t)));
  return panels.map(({ title, lines }) => {
    const tokens = [...new Set(lines.flatMap((l) => [...byTask.get(l.task).get(l.metric).keys()]))].sort((a, b) => a - b);
    const data = [tokens];
    const series = [{ label: "tokens" }];
    const bands = [];
    lines.forEach((l, i) => {
      const values = byTask.get(l.task).get(l.metric);
      const errors = byTask.get(l.task).get(`${l.metric}_stderr`);
      const color = COLORS[i % COLORS.length];
      data.push(tokens.map((t) => values.get(t) ?? null));
      series.push({ label: l.label, stroke: l.dashed ? "#999" : color, width: l.dashed ? 1 : 2, dash: l.dashed ? [4, 4] : undefined,
                    spanGaps: true, points: { show: !l.dashed } });
      if (errors) {
        const at = data.length;
        data.push(tokens.map((t) => (values.has(t) && errors.has(t) ? values.get(t) + errors.get(t) : null)),
                  tokens.map((t) => (values.has(t) && errors.has(t) ? values.get(t) - errors.get(t) : null)));
        // Band edges: style.css keeps their class out of the legend.
        const edge = (label) => ({ label, class: "band-edge", stroke: "transparent", spanGaps: true, points: { show: false } });
        series.push(edge(`${l.label} + stderr`), edge(`${l.label} − stderr`));
        bands.push({ series: [at, at + 1], fill: color + "22" });
      }
    });
    return { title, data, series, bands };
  });
}

function drawEvalPanel(container, width, { title, data, series, bands }) {
  const box = document.createElement("div");
  box.className = "chart eval";
  box.dataset.panel = title;
  container.append(box);
  state.charts.push(new uPlot({
    title, width, height: 220, series, bands,
    axes: [{ values: (u, vals) => vals.map((v) => tick(v)) }, { size: 60, values: yTicks }],
  }, data, box));
}

function draw() {
  const container = $("#charts");
  container.replaceChildren();
  state.charts = [];
  const width = Math.max(320, Math.floor(container.clientWidth / 2) - 24);
  for (const panel of PANELS) {
    const { data, series } = chartData(panel);
    if (series.length < 2) continue;
    const box = document.createElement("div");
    box.className = "chart";
    box.dataset.panel = panel.title;
    const tip = document.createElement("div");
    tip.className = "alert-tip";
    container.append(box);
    const chart = new uPlot({
      title: panel.title,
      width, height: 220,
      scales: { x: { time: state.xAxis === "time" } },
      axes: [{}, { size: 60, values: yTicks }],
      series,
      cursor: { drag: { x: true, y: false } },
      hooks: {
        draw: panel.spikeBand ? [spikeEpisodes, alertMarkers] : [alertMarkers],
        setSelect: [(u) => {
          if (u.select.width < 5 || state.xAxis !== "step") return;
          const from = Math.max(0, Math.floor(u.posToVal(u.select.left, "x")));
          const to = Math.ceil(u.posToVal(u.select.left + u.select.width, "x"));
          state.zoom = [from, to];
          refresh();
        }],
        setCursor: [(u) => {
          const a = u.cursor.left >= 0 ? alertAt(u, u.cursor.left) : null;
          tip.textContent = a ? `step ${a.step}: ${a.kind} — ${a.message}` : "";
          tip.style.display = a ? "block" : "none";
        }],
      },
    }, data, box);
    box.append(tip);
    state.charts.push(chart);
    if (panel.title === "loss") for (const p of evalPanels()) drawEvalPanel(container, width, p);
  }
}

// The uptime timeline: wall time from the first start to the last event;
// training segments green (each start or restart to the stop, crash or halt
// that ends it, or to its last event), downtime red, events as ticks.
async function loadUptime() {
  const { events, uptime } = await fetchJson(api("/events"));
  const bar = $("#uptime");
  bar.replaceChildren();
  if (!events.length) return;
  // A run still going trains until now.
  const running = $("#run-status").textContent === "running";
  const now = Date.now() / 1000;
  const t0 = events[0].time, t1 = Math.max(events.at(-1).time, running ? now : 0, t0 + 1e-3);  // no zero-length axis
  const pos = (t) => `${(100 * (t - t0)) / (t1 - t0)}%`;
  for (let i = 0; i < events.length; i++) {
    if (events[i].kind !== "start" && events[i].kind !== "restart") continue;
    let end = events[i].time;
    let j = i + 1;
    for (; j < events.length && !["start", "restart"].includes(events[j].kind); j++) {
      end = events[j].time;
      if (["stop", "crash", "halt", "stale"].includes(events[j].kind)) break;
    }
    if (j >= events.length && running) end = now;
    const seg = document.createElement("span");
    seg.className = "segment";
    seg.style.left = pos(events[i].time);
    seg.style.width = `${(100 * (end - events[i].time)) / (t1 - t0)}%`;
    bar.append(seg);
  }
  for (const e of events) {
    if (e.kind === "heartbeat") continue;
    const mark = document.createElement("span");
    mark.className = `event ${e.kind}`;
    mark.style.left = pos(e.time);
    mark.title = `${e.kind} at step ${e.step}${e.detail ? ": " + e.detail : ""}`;
    bar.append(mark);
  }
  const label = document.createElement("span");
  label.className = "uptime-label";
  label.textContent = `uptime ${(100 * uptime.ratio).toFixed(1)}% · ${uptime.restarts} restarts`;
  bar.append(label);
}

async function loadEvals() {
  const { evals } = await fetchJson(api("/evals"));
  const changed = evals.length !== state.evals.length;
  state.evals = evals;
  return changed;
}

async function loadAlerts() {
  const { alerts } = await fetchJson(api("/alerts"));
  state.alerts = alerts;
  $("#alerts").replaceChildren(...alerts.map((a) => {
    const li = document.createElement("li");
    li.className = a.severity;
    li.textContent = `step ${a.step} · ${a.kind} · ${a.message}`;
    return li;
  }));
}

async function refresh() {
  try {
    const { runs } = await fetchJson("/api/v1/runs");
    const run = runs.find((r) => r.name === runName);
    if (!run) throw new Error(`no run named "${runName}"`);
    $("#run-name").textContent = run.name;
    $("#run-status").textContent = run.status;
    $("#run-status").className = `status ${run.status}`;
    const par = run.config?.parallel;
    const layout = par && par.dp * par.tp > 1 ? ` · DP ${par.dp} × TP ${par.tp}${par.zero1 ? " (ZeRO-1)" : ""}` : "";
    $("#run-steps").textContent = `${run.steps} steps · ${run.precision || "?"}${layout}`;
    state.haltRoute = run.halt_route;
    showHaltButton(run.status);
    const width = Math.max(320, Math.floor($("#charts").clientWidth / 2) - 24);
    const { keys } = await fetchJson(api("/keys"));
    const wanted = [...new Set(PANELS.flatMap((p) => p.keys))].filter((k) => keys.includes(k));
    for (const key of ["tokens_seen", ...wanted]) {
      if (keys.includes(key)) state.series[key] = await loadSeries(key, width);
    }
    const tok = state.series.tokens_seen;
    if (tok && tok.steps.length) state.tokensPerStep = tok.values[tok.values.length - 1] / (tok.steps[tok.steps.length - 1] + 1);
    const loss = state.series.loss;
    if (loss) loss.steps.forEach((s, i) => { if (loss.times[i] !== null) state.times[s] = loss.times[i]; });
    await loadAlerts();
    await loadUptime();
    await loadEvals();
    draw();
    $("#message").textContent = "";
  } catch (e) {
    $("#message").textContent = `Cannot load the run: ${e.message}`;
  }
}

// Live: new points, alerts and status arrive as events and are appended.
function listen() {
  const keys = [...new Set(PANELS.flatMap((p) => p.keys)), "tokens_seen"].join(",");
  // Continue exactly where the first load ended, so no step falls in between.
  const loaded = state.series.loss?.steps ?? [];
  const after = loaded.length ? `&after=${loaded[loaded.length - 1]}` : "";
  const source = new EventSource(api(`/stream?keys=${encodeURIComponent(keys)}${after}`));
  source.addEventListener("open", () => $("#live").classList.add("on"));
  source.addEventListener("error", () => $("#live").classList.remove("on"));
  source.addEventListener("points", (e) => {
    const { key, points } = JSON.parse(e.data);
    const s = (state.series[key] ??= { steps: [], values: [], max: [], times: [] });
    for (const [step, value, time] of points) {
      if (state.zoom && step > state.zoom[1]) continue;
      s.steps.push(step); s.values.push(value); s.max.push(value); s.times.push(time);
      if (key === "loss") state.times[step] = time;
    }
    scheduleDraw();
  });
  source.addEventListener("alert", () => loadAlerts().then(scheduleDraw));
  // Evaluations come from another process (`hlat eval --watch`), often after
  // training has ended: looked for every 10 s.
  setInterval(() => loadEvals().then((changed) => changed && scheduleDraw()).catch(() => {}), 10000);
  source.addEventListener("status", (e) => {
    const { status } = JSON.parse(e.data);
    $("#run-status").textContent = status;
    $("#run-status").className = `status ${status}`;
    showHaltButton(status);
    loadUptime();
  });
}

let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => { drawPending = false; draw(); });
}

$("#x-axis").addEventListener("change", (e) => { state.xAxis = e.target.value; draw(); });
$("#smoothing").addEventListener("input", (e) => {
  state.smoothing = Number(e.target.value);
  $("#smoothing-value").textContent = state.smoothing.toFixed(2);
  draw();
});
$("#reset-zoom").addEventListener("click", () => { state.zoom = null; refresh(); });
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

if (!runName) {
  $("#message").textContent = "No run given: open this page from the runs list.";
} else {
  refresh().then(listen);
}
