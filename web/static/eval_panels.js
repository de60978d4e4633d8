// Checkpoint evaluations (`hlat eval --watch`) as panels against tokens seen,
// with a band of one standard error.
import { COLORS, tick, yTicks } from "./series.js";

// Eval panels: bits per byte of every perplexity task, then each task's
// accuracies (with its chance level dashed), then the gold answers' mean
// log-probability. The trainer's own held-out loss is on the loss panel.
export function evalPanels(evals) {
  const byTask = new Map();
  for (const e of evals) {
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

export function drawEvalPanel(container, width, { title, data, series, bands }, state, height = 300) {
  const box = document.createElement("div");
  box.className = "chart eval";
  box.dataset.panel = title;
  container.append(box);
  state.charts[`eval:${title}`] = new uPlot({
    title, width, height, series, bands,
    axes: [{ values: (u, vals) => vals.map((v) => tick(v)) }, { size: 60, values: yTicks }],
  }, data, box);
}

