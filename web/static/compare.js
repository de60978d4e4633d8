// Overlay of several runs (the precision post-mortem starts here): one metric,
// aligned by step or tokens, and the config fields in which the runs differ.
const names = (new URLSearchParams(location.search).get("runs") || "").split(",").filter(Boolean);
const $ = (sel) => document.querySelector(sel);
const COLORS = ["#1f6feb", "#d4770c", "#2da44e", "#8250df", "#cf222e", "#57606a"];
const run = (name, path) => `/api/v1/runs/${encodeURIComponent(name)}${path}`;
let chart = null;

async function json(url) {
  const r = await fetch(url);
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function ema(values, alpha) {
  let acc = null;
  return values.map((v) => (v === null ? v : (acc = acc === null ? v : alpha * acc + (1 - alpha) * v)));
}

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

async function draw() {
  const key = $("#key").value, align = $("#align").value, alpha = Number($("#smoothing").value);
  const series = await Promise.all(names.map(async (name) => {
    const [values, tokens] = await Promise.all([
      json(run(name, `/series?key=${encodeURIComponent(key)}&points=1000`)),
      align === "tokens" ? json(run(name, "/series?key=tokens_seen&points=1000")) : null,
    ]);
    const perStep = tokens && tokens.buckets.length
      ? tokens.buckets.at(-1)[4] / (tokens.buckets.at(-1)[1] + 1) : 1;
    return values.buckets.map(([, last, , , v]) => [align === "tokens" ? (last + 1) * perStep : last, v]);
  }));
  const xs = [...new Set(series.flatMap((s) => s.map(([x]) => x)))].sort((a, b) => a - b);
  const data = [xs, ...series.map((s) => {
    const m = new Map(s);
    return ema(xs.map((x) => (m.has(x) ? m.get(x) : null)), alpha);
  })];
  const opts = {
    width: Math.max(480, $("#chart").clientWidth - 8), height: 420, title: key,
    scales: { x: { time: false } },
    series: [{ label: align }, ...names.map((n, i) => ({ label: n, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true }))],
  };
  if (chart) chart.destroy();
  chart = new uPlot(opts, data, $("#chart"));
}

async function start() {
  if (names.length < 2) throw new Error("give two or more runs: compare.html?runs=a,b");
  const { runs } = await json("/api/v1/runs");
  const chosen = names.map((n) => runs.find((r) => r.name === n) ?? (() => { throw new Error(`no run "${n}"`); })());
  showDiff(chosen);
  $("#report").href = `/api/v1/report?runs=${names.map(encodeURIComponent).join(",")}`;
  const keys = (await Promise.all(names.map((n) => json(run(n, "/keys"))))).map((k) => new Set(k.keys));
  const common = [...keys[0]].filter((k) => keys.every((s) => s.has(k))).sort();
  $("#key").replaceChildren(...common.map((k) => Object.assign(document.createElement("option"), { value: k, textContent: k })));
  if (common.includes("loss")) $("#key").value = "loss";
  for (const el of ["#key", "#align", "#smoothing"]) $(el).addEventListener("change", () => draw().catch(fail));
  await draw();
}

function fail(e) {
  $("#message").textContent = `Cannot compare: ${e.message}`;
}

start().catch(fail);
