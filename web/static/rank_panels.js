// Per-rank series of a distributed run (the store's rank metrics): each rank's
// compute time, communication wait and data wait per step, the health check's
// all-reduce time, TP drift by rank, and any other per-rank key. One panel per
// key, one line per rank, so a straggler is the line above the others.
import { COLORS, fetchJson, yTicks } from "./series.js";

// The run's per-rank panels come from the metric catalogue (the `panels` of
// GET .../keys marked per_rank: one key each, titled), so every per-rank key
// the run has is drawn, including one nobody has catalogued.
export async function loadRankPanels(api, panels) {
  const wanted = panels.filter((p) => p.per_rank);
  return Promise.all(wanted.map(async ({ title, keys: [key] }) => {
    const { ranks } = await fetchJson(api(`/rank_series?key=${encodeURIComponent(key)}`));
    const steps = [...new Set(Object.values(ranks).flatMap((rows) => rows.map((r) => r[0])))].sort((a, b) => a - b);
    const data = [steps];
    const series = [{ label: "step" }];
    Object.entries(ranks).forEach(([rank, rows], i) => {
      const byStep = new Map(rows.map(([step, value]) => [step, value]));
      data.push(steps.map((s) => byStep.get(s) ?? null));
      series.push({ label: `rank ${rank}`, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
                    points: { show: steps.length < 60 } });
    });
    return { key, title, data, series };
  }));
}

export function drawRankPanel(container, width, { key, title, data, series }, charts, height = 300) {
  const box = document.createElement("div");
  box.className = "chart ranks";
  box.dataset.panel = key;
  container.append(box);
  charts[`rank:${key}`] = new uPlot({
    title, width, height, series,
    scales: { x: { time: false } },
    axes: [{}, { size: 60, values: yTicks }],
    cursor: { sync: { key: "hlat-run" } },
  }, data, box);
}
