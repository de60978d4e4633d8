// The model internals below the charts: statistics over layers, heads and
// tensors as heatmaps (heatmaps.js), one request per vector key, as many
// buckets as the panel has pixel columns, over the zoomed range; alert
// episodes drawn as lines on them, and an alert's flight-recorder window
// marked when its button zoomed there.
import { loadHeatmaps, drawHeatmaps } from "./heatmaps.js";
import { $, api, state, zoomTo } from "./dashboard_state.js";

// (the section is hidden until its first draw: the page's width, not its own)
const heatmapWidth = () => Math.max(480, $("#charts").clientWidth - 8);

export async function loadInternals() {
  const vectors = state.catalogue.vectors ?? [];
  const range = state.zoom ? { from: state.zoom[0], to: state.zoom[1] } : {};
  return vectors.length ? loadHeatmaps(api, vectors, { ...range, buckets: Math.min(2000, heatmapWidth()) }) : [];
}

export function drawInternals() {
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
export function internalsSoon() {
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
