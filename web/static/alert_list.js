// The run page's list of alerts: one line per alert (its step zooms to it),
// its flight-recorder button, its "Why" (attribution.js, collapsed) and the
// rewind it caused; a rewind whose alert is not listed gets a line of its own.
import { whySection } from "./attribution.js";

const drawn = new WeakMap();  // list -> what it shows, so an unchanged list is left as it is

// Fills `list` (a <ul>) from
//   alerts, omitted: the alerts API's reply; rewinds: attribution.js rewindsOf();
//   whyOpen: a Set of "kind@step" whose "Why" is open, kept up to date here;
//   titleOf(key): a statistic's title; onStep(alert), onWindow(alert): the
//   step link and the flight-recorder button.
// Drawn again only when something in it changed, so an open "Why" (and
// where its text boxes are scrolled to) stays as it is on a live page.
export function showAlertList(list, { alerts, omitted, rewinds, whyOpen, titleOf, onStep, onWindow }) {
  const last = alerts.at(-1);
  const shows = JSON.stringify([omitted, alerts.length, last?.kind, last?.step, last?.time, rewinds.map((r) => r.label)]);
  if (drawn.get(list) === shows) return;
  drawn.set(list, shows);
  const earlier = omitted ? [Object.assign(document.createElement("li"), {
    textContent: `${omitted} earlier alerts are not listed (the server lists the latest ${alerts.length})`,
  })] : [];
  const rewindLine = (r) => Object.assign(document.createElement("div"), { className: "rewind", textContent: `↶ ${r.label}` });
  const listed = new Set();
  const items = alerts.map((a) => {
    const li = alertItem(a, { whyOpen, titleOf, onStep, onWindow });
    for (const r of rewinds) {
      if (r.step !== a.step || r.kind !== a.kind) continue;
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
  list.replaceChildren(...earlier, ...items, ...orphans);
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
