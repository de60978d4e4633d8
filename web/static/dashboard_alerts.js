// The run's alerts on its page: the server's reply (the latest alerts and
// the newest episodes they group into, telemetry/alert_episodes.h) kept in the
// state for the charts' marks and the header, and listed below the charts
// (alert_list.js) with the rewinds rewind_skip made; a line zooms to its
// alert or episode, a flight-recorder button to the alert's window.
import { fetchJson } from "./series.js";
import { rewindsOf } from "./attribution.js";
import { showAlertList } from "./alert_list.js";
import { refreshHeader } from "./dashboard_header.js";
import { shadedSpikes } from "./dashboard_charts.js";
import { $, api, state, zoomTo } from "./dashboard_state.js";

// GET .../alerts's reply: what the charts mark, the list shows and the
// header reads (a nonfinite episode says where the run diverged).
export function setAlerts(reply) {
  state.alerts = reply.alerts;
  state.alertsTotal = reply.total;
  state.alertsOmitted = reply.omitted;
  state.episodesTotal = reply.episodes_total;
  state.alertEpisodes = reply.episodes;
  state.shaded = shadedSpikes();
  showAlerts();
  refreshHeader();
}

export const loadAlerts = async () => setAlerts(await fetchJson(api("/alerts")));

// The rewinds come with the events (the uptime timeline's request).
export function showRewinds(events) {
  state.rewinds = rewindsOf(events ?? []);
  showAlerts();
}

function showAlerts() {
  // A step's line zooms to a window around it: 1% of the run, at least 50 steps.
  const half = () => Math.max(25, Math.round(0.01 * Math.max(state.lastStep, 1)));
  showAlertList($("#alerts"), $("#alerts-summary"), {
    episodes: state.alertEpisodes, episodesTotal: state.episodesTotal, alerts: state.alerts,
    total: state.alertsTotal, omitted: state.alertsOmitted, rewinds: state.rewinds,
    whyOpen: state.whyOpen, episodesOpen: state.episodesOpen,
    titleOf: (key) => (state.catalogue.vectors ?? []).find((v) => v.key === key)?.title ?? key,
    onStep: (a) => zoomTo(a.step - half(), a.step + half()),
    onRange: (first, last) => zoomTo(first - half(), last + half()),
    onWindow: (a) => {
      state.marked = a;
      zoomTo(a.data.flight_recorder.first_step, a.data.flight_recorder.last_step);
      $("#internals").scrollIntoView({ block: "start" });
    },
  });
}
