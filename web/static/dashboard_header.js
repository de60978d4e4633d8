// The run page's header, from the run's record and what the page has
// loaded or heard since: its name, its steps so far with its precision,
// layout and cost, its status (run_header.js: "diverged at step 900",
// "disconnected — last heard ...") and the Halt button, which asks for the
// access token and says the answer beside it.
import { fetchJson } from "./series.js";
import { showPreflight } from "./preflight.js";
import { divergedAt, showStatus, showHaltButton } from "./run_header.js";
import { say } from "./messages.js";
import { $, api, runName, state } from "./dashboard_state.js";

// The run's record (an entry of GET /api/v1/runs), read on every load.
export function showHeader(run) {
  $("#run-name").textContent = run.name;
  state.status = run.status;
  const par = run.config?.parallel;
  const layout = par && par.dp * par.tp > 1 ? ` · DP ${par.dp} × TP ${par.tp}${par.zero1 ? " (ZeRO-1)" : ""}` : "";
  state.lastStep = Math.max(state.lastStep, run.steps - 1);
  state.header = `${run.precision ? ` · ${run.precision}` : ""}${layout}`;
  showSteps();
  state.haltRoute = run.halt_route;
  refreshHeader();
  if (run.preflight) {  // a pre-flight has no steps: its tables, not charts
    document.body.classList.add("preflight-run");
    showPreflight(run.preflight, $("#preflight"));
  }
}

// The status (with where the run diverged) and the Halt button, from what
// the page knows now (run_header.js).
export function refreshHeader() {
  if (state.status === "diverged") state.divergedAt = divergedAt(state.series, state.alertEpisodes, state.divergedAt, state.lastStep);
  showStatus(state, state.conn);
  showHaltButton(state, state.conn);
}

// "12,000 steps · bf16_sr · DP 2 × TP 2 · CPT ...": the live stream moves the count.
export function showSteps() {
  $("#run-steps").textContent = `${(state.lastStep + 1).toLocaleString("en-US")} steps${state.header ?? ""}${state.cost ?? ""}`;
}

// Cost per 4M tokens at the median tokens/s drawn, every rank billed at the
// run's price per rank-hour (run.price_per_rank_hour); nothing without a price.
export function showCost(run) {
  const price = run.config?.run?.price_per_rank_hour;
  const tps = state.series.tokens_per_s?.line.filter((v) => v > 0).sort((a, b) => a - b);
  if (!(price > 0) || !tps?.length) return;
  const ranks = (run.config?.parallel?.dp ?? 1) * (run.config?.parallel?.tp ?? 1);
  const cpt = (price * ranks / 3600) * 4e6 / tps[Math.floor(tps.length / 2)];
  state.cost = ` · CPT ${cpt.toPrecision(3)} per 4M tokens`;
  showSteps();
}

// A halt's answer stays beside the button until dismissed.
export async function halt() {
  if (!confirm(`Halt run "${runName}"? ${$("#halt").title}`)) return;
  const token = prompt("Access token (printed by `hlat serve` at start):");
  if (token === null) return;
  try {
    const body = await fetchJson(api("/halt"), { method: "POST", headers: { "X-HLAT-Token": token } });
    say($("#halt-message"), `Halt requested: ${body.halt}`, "ok");
  } catch (e) {
    if (e instanceof TypeError) state.conn.doubt();
    say($("#halt-message"), `Halt refused: ${e.message}`, "error");
  }
}
