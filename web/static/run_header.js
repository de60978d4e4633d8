// The run page's header says what the page knows, and no more: the run's
// status ("diverged at step 900" in red when its training values went
// non-finite and stayed so), "disconnected — last heard 09:41:15" while the
// server does not answer (never a green "running" from a dead stream), and a
// Halt button that is off, with the reason in its title, whenever a halt
// could not reach the run.
import { nonFiniteAt } from "./series.js";

const $ = (sel) => document.querySelector(sel);
const stepText = (step) => step.toLocaleString("en-US");

// Where the run's loss or gradient norm went non-finite for good, as far as
// the page knows: the start of the stretch that lasts to its last step (an
// Inf the run came back from, thousands of steps earlier, is not where it
// diverged; the report's trailing_nonfinite_step says the same). [first, last]
// steps (first === last when exact), from the nonfinite detector's latest
// episode (exact) or else the loaded series (a downsampled bucket says only
// which steps); null when neither shows one. `earlier`: what an earlier call
// found (a zoomed load sees less); `lastStep`: the run's last step, which a
// load must reach to show the stretch that lasts to it.
export function divergedAt(series, episodes, earlier = null, lastStep = -1) {
  const exact = episodes.filter((e) => e.kind === "nonfinite").map((e) => e.first_step);
  if (exact.length) return [Math.max(...exact), Math.max(...exact)];
  let found = earlier;
  for (const key of ["loss", "grad_norm"]) {
    const s = series[key], n = s?.steps.length ?? 0;
    if (!n || s.steps[n - 1] < lastStep || !nonFiniteAt(s, n - 1)) continue;
    let j = n - 1;
    while (j > 0 && nonFiniteAt(s, j - 1)) j--;
    const at = [s.first[j], s.steps[j]];
    // Earlier than what was found, or inside it (a zoomed load is more exact).
    if (!found || at[0] < found[0] || (at[0] >= found[0] && at[1] <= found[1])) found = at;
  }
  return found;
}

// state: { status, divergedAt, streaming, haltRoute }; conn: connection.js.
export function showStatus(state, conn) {
  const el = $("#run-status"), live = $("#live");
  if (!conn.connected) {
    el.textContent = `disconnected — last heard ${conn.lastHeardText()}`;
    el.className = "status disconnected";
    el.title = "The server does not answer: what this page shows may be out of date. It reconnects by itself.";
    live.classList.remove("on");
    live.textContent = "offline";
    return;
  }
  const status = state.status ?? "";
  const [first, last] = state.divergedAt ?? [];
  el.textContent = status !== "diverged" || first === undefined ? status
    : first === last ? `diverged at step ${stepText(first)}` : `diverged in steps ${stepText(first)}–${stepText(last)}`;
  el.className = `status ${status}`;
  el.title = status === "diverged" ? "its loss or gradient norm went non-finite and stayed so to its last step" : "";
  // Live only while the stream is open and the run is running.
  live.classList.toggle("on", Boolean(state.streaming) && status === "running");
  live.textContent = status === "running" ? "live" : status;
}

// The halt button says what a halt would do for this kind of run (hlat's own
// trainer, the Python client, `ingest --follow --on-halt`), and is off for a
// run that nothing here can stop (a log imported once), or while the server
// does not answer.
export function showHaltButton(state, conn) {
  const button = $("#halt");
  const { status, haltRoute: route } = state;
  button.disabled = !conn.connected || status !== "running" || !route;
  button.title = !conn.connected ? `The server does not answer since ${conn.lastHeardText()}: a halt cannot be sent.`
    : status !== "running" ? `the run is ${status}`
    : route ? `On halt, ${route}.`
    : "Nothing here can stop this run: it is imported from a log. Halt its trainer by hand, " +
      "or follow the log with `hlat ingest --follow --on-halt`.";
}
