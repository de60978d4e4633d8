// Per-rank series of a distributed run (the store's rank metrics): each rank's
// compute time, communication wait and data wait per step, the health check's
// all-reduce time, TP drift by rank. One panel per key, one line per rank, so
// a straggler is the line above the others.
import { COLORS, fetchJson, yTicks } from "./series.js";

const TITLES = {
  "rank/compute_s": "per rank: compute s (forward, backward, optimizer less communication)",
  "rank/comm_wait_s": "per rank: waiting for the gradient reduction, s",
  "rank/data_wait_s": "per rank: waiting for data, s",
  "health/allreduce_us": "per rank: health-check 1 MB all-reduce, µs",
  "health/wrong_gemm_elements": "per rank: wrong elements in the health check's exact GEMMs",
  "tp_drift": "per rank: TP drift of the replicated weights",
};

// Keys drawn as panels: those of the table above that the run has.
export async function loadRankPanels(api) {
  const { keys } = await fetchJson(api("/rank_keys"));
  const wanted = keys.filter((k) => k in TITLES);
  return Promise.all(wanted.map(async (key) => {
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
    return { key, title: TITLES[key], data, series };
  }));
}

export function drawRankPanel(container, width, { key, title, data, series }, charts) {
  const box = document.createElement("div");
  box.className = "chart ranks";
  box.dataset.panel = key;
  container.append(box);
  charts[`rank:${key}`] = new uPlot({
    title, width, height: 220, series,
    scales: { x: { time: false } },
    axes: [{}, { size: 60, values: yTicks }],
    cursor: { sync: { key: "hlat-run" } },
  }, data, box);
}
