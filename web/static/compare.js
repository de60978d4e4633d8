// Overlay of several runs (the precision post-mortem starts here): any metric
// of any of them, each run as an envelope (bucket min..max band, mean line),
// aligned by step, tokens or wall time since its start, and the config fields
// in which the runs differ. The URL holds the view.
import { COLORS, fetchJson as json, loadSeries, envelopeParts, yTicks } from "./series.js";
import { downloadPng, downloadSvg, chartSvg } from "./chart_export.js";

const params = new URLSearchParams(location.search);
// runs=a,b with each name URL-encoded: split the raw text on its literal
// commas before decoding, so a name holding a comma (%2C) stays one name.
const rawRuns = (location.search.slice(1).split("&").find((p) => p.startsWith("runs=")) || "runs=").slice(5);
const names = rawRuns.split(",").filter(Boolean).map((n) => decodeURIComponent(n.replace(/\+/g, " ")));
const $ = (sel) => document.querySelector(sel);
const run = (name, path) => `/api/v1/runs/${encodeURIComponent(name)}${path}`;

// Every config leaf as "section.field" -> value.
function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj ?? {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = JSON.stringify(v);
  }
  return out;
}

function showDiff(runs) {
  const flat = runs.map((r) => flatten(r.config));
  // Fields that differ between any two runs; where a run lives is not a difference.
  const ignore = new Set(["run.name", "run.out_dir"]);
  const keys = [...new Set(flat.flatMap(Object.keys))].sort()
    .filter((k) => !ignore.has(k) && new Set(flat.map((f) => f[k])).size > 1);
  $("#diff thead").replaceChildren(Object.assign(document.createElement("tr"), {
    innerHTML: "<th>field</th>" + runs.map((r) => `<th></th>`).join(""),
  }));
  [...$("#diff thead tr").children].slice(1).forEach((th, i) => (th.textContent = runs[i].name));
  $("#diff tbody").replaceChildren(...keys.map((k) => {
    const tr = document.createElement("tr");
    const head = document.createElement("td");
    head.textContent = k;
    tr.append(head, ...flat.map((f) => Object.assign(document.createElement("td"), { textContent: f[k] ?? "-" })));
    return tr;
  }));
  if (!keys.length) $("#diff tbody").textContent = "The configs are identical.";
}

// Exposed for the end-to-end test.
// entries: each key's metric catalogue entry (title, unit, group), from the runs' keys.
const state = (window.hlatCompare = { series: [], chart: null, key: null, entries: {}, svg: () => chartSvg(state.chart),
                                      csv: () => chartCsv() });

// x of a run's point: its step, its tokens seen, or seconds since its first point.
function aligner(align, s, tokensPerStep) {
  if (align === "tokens") return (i) => (s.steps[i] + 1) * tokensPerStep;
  if (align === "time") return (i) => (s.times[i] === null ? null : s.times[i] - s.times[0]);
  return (i) => s.steps[i];
}

// A draw overtaken by a later one (the key changed again before its series
// came back) drops what it fetched, so the chart always shows the key picked.
let drawsStarted = 0;
async function draw() {
  const ticket = ++drawsStarted;
  const key = $("#key").value, align = $("#align").value, smoothing = Number($("#smoothing").value);
  history.replaceState(null, "", `?${new URLSearchParams({ runs: names.join(","), key, align, smooth: smoothing })}`);
  const width = Math.max(480, $("#chart").clientWidth - 8);
  const series = await Promise.all(names.map(async (name) => {
    const base = run(name, "");
    const [values, tokens] = await Promise.all([
      loadSeries(base, key, { width }).catch(() => null),  // a run without this key is left out
      align === "tokens" ? loadSeries(base, "tokens_seen", { width }).catch(() => null) : null,
    ]);
    if (!values) return null;
    const perStep = tokens && tokens.steps.length ? tokens.line.at(-1) / (tokens.steps.at(-1) + 1) : 1;
    const x = aligner(align, values, perStep);
    // Re-keyed by x so that runs with different step grids share one axis.
    const out = { ...values, steps: values.steps.map((_, i) => x(i)) };
    return { name, s: out };
  }));
  if (ticket !== drawsStarted) return;
  state.series = series;
  const xs = [...new Set(series.flatMap((r) => (r ? r.s.steps.filter((x) => x !== null) : [])))].sort((a, b) => a - b);
  const data = [xs];
  const opts = [{ label: align }];
  const bands = [];
  series.forEach((r, i) => {
    if (!r) return;
    const parts = envelopeParts(r.s, xs, { color: COLORS[i % COLORS.length], smoothing, label: r.name, offset: data.length });
    data.push(...parts.data);
    opts.push(...parts.series);
    bands.push(...parts.bands);
  });
  if (state.chart) state.chart.destroy();
  state.chart = new uPlot({
    width, height: 420, title: state.entries[key]?.title ?? key, series: opts, bands,
    scales: { x: { time: false } },
    axes: [{}, { size: 60, values: yTicks }],
  }, data, $("#chart"));
  state.key = key;
}

async function start() {
  if (names.length < 2) throw new Error("give two or more runs: compare.html?runs=a,b");
  const { runs } = await json("/api/v1/runs");
  const chosen = names.map((n) => runs.find((r) => r.name === n) ?? (() => { throw new Error(`no run "${n}"`); })());
  showDiff(chosen);
  $("#report").href = `/api/v1/report?runs=${encodeURIComponent(JSON.stringify(names))}`;
  // Every key of any run under its catalogue group, in the catalogue's order;
  // keys only some runs have are marked with those runs.
  const replies = await Promise.all(names.map((n) => json(run(n, "/keys"))));
  const keys = replies.map((k) => new Set(k.keys));
  const ordered = [...new Set(replies.flatMap((r) => r.panels.filter((p) => !p.per_rank).flatMap((p) => p.keys)))];
  for (const r of replies) Object.assign(state.entries, r.metrics);
  const all = [...ordered].sort();
  const common = all.filter((k) => keys.every((s) => s.has(k)));
  const groups = new Map();
  for (const k of ordered) {
    const group = state.entries[k]?.group ?? "metrics";
    if (!groups.has(group)) groups.set(group, Object.assign(document.createElement("optgroup"), { label: group }));
    const note = common.includes(k) ? "" : ` (${names.filter((_, i) => keys[i].has(k)).join(", ")})`;
    groups.get(group).append(Object.assign(document.createElement("option"), { value: k, textContent: k + note,
                                                                                 title: state.entries[k]?.title ?? k }));
  }
  $("#key").replaceChildren(...groups.values());
  const wanted = params.get("key");
  $("#key").value = wanted && all.includes(wanted) ? wanted : common.includes("loss") ? "loss" : all[0];
  if (params.has("align")) $("#align").value = params.get("align");
  if (params.has("smooth")) $("#smoothing").value = params.get("smooth");
  for (const el of ["#key", "#align", "#smoothing"]) $(el).addEventListener("change", () => draw().catch(fail));
  await draw();
}

// The chart's data as CSV: x, then each run's line (bucket mean or value)
// and its envelope (bucket min and max), one row per x of the chart.
function chartCsv() {
  const runs = state.series.filter(Boolean);
  const rows = new Map();
  runs.forEach((r, k) => r.s.steps.forEach((x, i) => {
    if (x === null) return;
    if (!rows.has(x)) rows.set(x, new Array(3 * runs.length).fill(""));
    rows.get(x).splice(3 * k, 3, r.s.line[i] ?? "", r.s.min[i] ?? "", r.s.max[i] ?? "");
  }));
  const header = [$("#align").value, ...runs.flatMap((r) => [r.name, `${r.name}:min`, `${r.name}:max`])];
  return [header, ...[...rows].sort((a, b) => a[0] - b[0]).map(([x, cells]) => [x, ...cells])]
    .map((row) => row.map((c) => (/[",\n]/.test(String(c)) ? `"${String(c).replace(/"/g, '""')}"` : c)).join(","))
    .join("\n") + "\n";
}

function exports() {
  const name = () => `compare-${state.key}`;
  $("#png").addEventListener("click", () => state.chart && downloadPng(state.chart, name()));
  $("#svg").addEventListener("click", () => state.chart && downloadSvg(state.chart, name()));
  $("#csv").addEventListener("click", () => {
    const a = Object.assign(document.createElement("a"), { download: `${name()}.csv` });
    a.href = URL.createObjectURL(new Blob([chartCsv()], { type: "text/csv" }));
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  });
}

function fail(e) {
  $("#message").textContent = `Cannot compare: ${e.message}`;
}

exports();
start().catch(fail);
