// A run's dashboard: one uPlot chart per panel, fed by the JSON API and kept
// live by the run's event stream. Downsampled series are envelopes (each
// bucket's min..max as a band, its mean as the line), so a one-step event is
// visible at any zoom, and hovering reads a bucket's min, max and last value
// (hover.js). A NaN or an infinity is never drawn over: the line breaks, a
// mark names it and a band runs from the first one on (chart_marks.js).
// Alerts come grouped into episodes by the server: one mark per episode on
// every chart and one line in the list, which zooms to it; grad-norm spike
// episodes are shaded where an alert or the threshold says so. The header
// says when the run diverged and when the server stopped answering
// (run_header.js, connection.js). Statistics over layers, heads and tensors
// are heatmaps below the charts (heatmaps.js); an alert with a
// flight-recorder window zooms everything to it. An alert the trainer could
// attribute says why under it (attribution.js); a rewind_skip's rewind is
// drawn on the charts and listed with its alert. Every key the run has can
// be drawn (the metric picker, searchable); the URL holds the view, so a
// link restores it.
//
// This module starts the page and wires its controls; the rest is one job
// a module: the view state (dashboard_state.js), what is fetched and the
// live stream (dashboard_data.js), the charts (dashboard_charts.js), the
// header (dashboard_header.js), the alert list (dashboard_alerts.js) and
// the heatmaps (dashboard_internals.js).
import { showStoreHealth } from "./store_health.js";
import { rememberColumns } from "./chart_layout.js";
import { connection } from "./connection.js";
import { say } from "./messages.js";
import { $, runName, state, saveView, resetZoom } from "./dashboard_state.js";
import { draw, scheduleDraw, shadedSpikes } from "./dashboard_charts.js";
import { refreshHeader, halt } from "./dashboard_header.js";
import { load, listen, closeStream, loadEvals } from "./dashboard_data.js";

// Whether the server answers: the header and the Halt button follow it.
state.conn = connection((up) => {
  refreshHeader();
  if (up) load().then(() => listen(true));
  else closeStream();
});

// The controls above the charts: set from the view (the URL's), and each
// change redrawn and kept in the URL.
function controls() {
  $("#x-axis").value = state.xAxis;
  $("#columns").value = String(state.columns);
  $("#smoothing").value = state.smoothing;
  $("#smoothing-value").textContent = state.smoothing.toFixed(2);
  $("#y-from").value = state.yFrom ?? "";
  $("#shade-ratio").value = state.shadeRatio;
  const redraw = () => { saveView(); draw(); };
  $("#x-axis").addEventListener("change", (e) => { state.xAxis = e.target.value; redraw(); });
  $("#columns").addEventListener("change", (e) => {
    state.columns = Number(e.target.value);
    rememberColumns(state.columns);
    redraw();
  });
  $("#smoothing").addEventListener("input", (e) => {
    state.smoothing = Number(e.target.value);
    $("#smoothing-value").textContent = state.smoothing.toFixed(2);
    redraw();
  });
  $("#y-from").addEventListener("change", (e) => {
    state.yFrom = e.target.value === "" ? null : Number(e.target.value);
    redraw();
  });
  $("#shade-ratio").addEventListener("change", (e) => {
    const ratio = Number(e.target.value);
    if (!(ratio >= 1)) return void (e.target.value = state.shadeRatio);
    state.shadeRatio = ratio;
    state.shaded = shadedSpikes();
    redraw();
  });
  $("#reset-zoom").addEventListener("click", resetZoom);
  $("#halt").addEventListener("click", halt);
}

if (!runName) {
  say($("#load-message"), "No run given: open this page from the runs list.", "error");
} else {
  document.title = `hlat · ${runName}`;
  controls();
  load().then(() => { saveView(); listen(); });
  // Evaluations come from another process (`hlat eval --watch`), often after
  // training has ended: looked for every 10 s, with the store's health; the
  // same tick asks whether the server is still there (a finished run's
  // stream is quiet).
  showStoreHealth($("#store-health"));
  setInterval(() => {
    state.conn.doubt();
    if (!state.conn.connected) return;
    showStoreHealth($("#store-health"));
    loadEvals().then((changed) => changed && scheduleDraw()).catch(() => {});
  }, 10000);
}
