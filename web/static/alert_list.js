// The run page's list of alerts: one line per alert episode, as the server
// groups them (GET .../alerts "episodes": telemetry/alert_episodes.h), so a
// run with 600 NaN alerts is one line,
// "nonfinite ×600, steps 900–1499, worst NaN at step 900", that opens to its
// alerts. A single alert keeps its own line: its step zooms to it, its
// flight-recorder button, its "Why" (attribution.js, collapsed) and the
// rewind it caused; a rewind whose alert is not listed gets a line of its
// own. Info alerts (one-step outliers, notes) are listed grey and counted.
import { whySection } from "./attribution.js";

const drawn = new WeakMap();  // list -> what it shows, so an unchanged list is left as it is
const SHOWN_PER_EPISODE = 200;  // alerts listed when an episode is opened

// Fills `list` (a <ul>) and `summary` (a line above it) from
//   episodes, episodesTotal: the alerts API's "episodes" (the newest of the
//     run's alerts grouped, 1,000 at most) and how many there are in all;
//   alerts, total, omitted: its list (the latest alerts), how many the run
//     has and how many the list left out;
//   rewinds: attribution.js rewindsOf();
//   whyOpen, episodesOpen: Sets of the "Why"s and episodes open, kept up to date here;
//   titleOf(key): a statistic's title; onStep(alert), onRange(first, last),
//   onWindow(alert): the step links and the flight-recorder button.
// Drawn again only when something in it changed, so an open "Why" (and
// where its text boxes are scrolled to) stays as it is on a live page.
export function showAlertList(list, summary, opts) {
  const { episodes, alerts, total, omitted, episodesTotal, rewinds } = opts;
  const last = alerts.at(-1);
  const shows = JSON.stringify([total, omitted, episodesTotal, alerts.length, last?.kind, last?.step, last?.time, rewinds.map((r) => r.label),
                                episodes.length, episodes.at(-1)]);
  if (drawn.get(list) === shows) return;
  drawn.set(list, shows);
  summary.textContent = summaryText(opts);
  const rewindLine = (r) => Object.assign(document.createElement("div"), { className: "rewind", textContent: `↶ ${r.label}` });
  const listed = new Set();
  const items = episodes.map((e) => {
    const li = e.count === 1 ? singleItem(e, opts) : episodeItem(e, opts);
    for (const r of rewinds) {
      if (r.step < e.first_step || r.step > e.last_step || r.kind !== e.kind) continue;
      listed.add(r);
      li.append(rewindLine(r));
    }
    return li;
  });
  const orphans = rewinds.filter((r) => !listed.has(r)).map((r) => {
    const li = Object.assign(document.createElement("li"), { className: "rewind" });
    li.append(rewindLine(r));
    return li;
  });
  list.replaceChildren(...items, ...orphans);
}

// "2 episodes from 601 alerts · 3 info notes (grey, drawn faintly) · 120 earlier alerts not listed".
function summaryText({ episodes, alerts, total, omitted, episodesTotal }) {
  if (!episodes.length) return "none";
  const count = (n, what) => `${n.toLocaleString("en-US")} ${what}${n === 1 ? "" : "s"}`;
  const listedOnly = episodesTotal > episodes.length;
  const info = episodes.filter((e) => e.severity === "info").reduce((n, e) => n + e.count, 0);
  const parts = [`${count(episodesTotal, "episode")} from ${count(total, "alert")}`];
  if (listedOnly) parts.push(`the newest ${episodes.length.toLocaleString("en-US")} episodes listed`);
  if (info) parts.push(`${count(info, "info note")}${listedOnly ? " in them" : ""} (grey, drawn faintly)`);
  if (omitted) parts.push(`the ${omitted.toLocaleString("en-US")} earliest alerts are counted but not listed one by one (the server lists the latest ${alerts.length.toLocaleString("en-US")})`);
  return parts.join(" · ");
}

// An episode of one alert: the alert's own line when the server listed it.
function singleItem(e, opts) {
  const a = opts.alerts.find((x) => x.kind === e.kind && x.severity === e.severity && x.step === e.first_step);
  return alertItem(a ?? { kind: e.kind, severity: e.severity, step: e.first_step, message: e.message }, opts);
}

// A stretch of alerts: one line that zooms to the stretch and opens to its alerts.
function episodeItem(e, opts) {
  const li = Object.assign(document.createElement("li"), { className: `${e.severity} episode` });
  const link = Object.assign(document.createElement("a"), { href: "#", textContent: episodeTitle(e), title: "zoom to this episode" });
  link.addEventListener("click", (ev) => {
    ev.preventDefault();
    opts.onRange(e.first_step, e.last_step);
  });
  li.append(link, ` · ${e.message}`);
  const details = Object.assign(document.createElement("details"), { className: "episode-alerts" });
  const id = episodeId(e);
  details.open = opts.episodesOpen.has(id);
  const members = alertsOf(e, opts.alerts);
  const missing = e.count - members.length;
  details.append(Object.assign(document.createElement("summary"), {
    textContent: `its ${e.count} alerts${missing > 0 ? ` (${missing} not listed by the server)` : ""}` }));
  const fill = () => {
    if (details.querySelector("ul")) return;
    const ul = document.createElement("ul");
    ul.append(...members.slice(0, SHOWN_PER_EPISODE).map((a) => alertItem(a, opts)));
    if (members.length > SHOWN_PER_EPISODE) {
      ul.append(Object.assign(document.createElement("li"), { textContent: `and ${members.length - SHOWN_PER_EPISODE} more` }));
    }
    details.append(ul);
  };
  if (details.open) fill();
  details.addEventListener("toggle", () => {
    if (details.open) opts.episodesOpen.add(id), fill();
    else opts.episodesOpen.delete(id);
  });
  li.append(details);
  return li;
}

function alertItem(a, { whyOpen, titleOf, onStep, onWindow }) {
  const li = document.createElement("li");
  li.className = a.severity;
  const link = Object.assign(document.createElement("a"), { href: "#", textContent: `step ${a.step}` });
  link.title = "zoom to this alert";
  link.addEventListener("click", (e) => {
    e.preventDefault();
    onStep(a);
  });
  li.append(link, ` · ${a.kind} · ${a.message}`);
  const window_ = a.data?.flight_recorder;
  if (window_) {
    const button = Object.assign(document.createElement("button"), { type: "button", className: "flight-recorder",
      textContent: `per-layer window, steps ${window_.first_step}–${window_.last_step}` });
    button.title = "zoom the charts and heatmaps to the steps stored at full resolution around this alert";
    button.addEventListener("click", () => onWindow(a));
    li.append(" ", button);
  }
  const id = `${a.kind}@${a.step}`;
  const why = whySection(a, {
    open: whyOpen.has(id),
    onToggle: (open) => (open ? whyOpen.add(id) : whyOpen.delete(id)),
    titleOf,
  });
  if (why) li.append(why);
  return li;
}

// The alerts (of those the server listed) that make up an episode: the
// server lists the latest 2,000, so an early episode may have fewer here
// than its count.
const alertsOf = (e, alerts) =>
  alerts.filter((a) => a.kind === e.kind && a.severity === e.severity && a.step >= e.first_step && a.step <= e.last_step);

const episodeId = (e) => `${e.kind}@${e.severity}@${e.first_step}`;

// A worst_value as read: "NaN", "+Inf", "-Inf", or four significant digits
// (the API sends a non-finite one as "nan", "inf" or "-inf").
function valueText(v) {
  if (v === null || v === undefined) return "";
  const n = v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity : Number(v);
  if (Number.isNaN(n)) return "NaN";
  if (!Number.isFinite(n)) return n > 0 ? "+Inf" : "-Inf";
  return Number(n.toPrecision(4)).toString();
}

// "nonfinite ×600, steps 900–1499, worst NaN at step 900" (a single alert: "step 60 · grad_spike").
function episodeTitle(e) {
  if (e.count === 1) return `step ${e.first_step} · ${e.kind}`;
  const worst = valueText(e.worst_value);
  return `${e.kind} ×${e.count}, steps ${e.first_step}–${e.last_step}${worst ? `, worst ${worst} at step ${e.worst_step}` : ""}`;
}
