// The uptime timeline of a run's page.
import { fetchJson } from "./series.js";
import { rewindsOf } from "./attribution.js";

const $ = (sel) => document.querySelector(sel);

// The uptime timeline: wall time from the first event to the last; the
// training segments the server computed green (GET .../events
// "uptime.segments", the stretches its uptime ratio counts: Reader::uptime),
// downtime red, events as ticks (a rewind's says what it skipped and where
// training restarted). Returns the events.
export async function loadUptime(api, status) {
  // Rewind plans are read whole (their skipped batch ids); other details as the server cuts them.
  const { events, uptime } = await fetchJson(api("/events?detail_max=65536"));
  showUnwatched(events);
  const bar = $("#uptime");
  bar.replaceChildren();
  if (!events.length) return events;
  // A run still going trains until now: its last segment is drawn to the present.
  const running = status === "running";
  const now = Date.now() / 1000;
  const t0 = events[0].time, t1 = Math.max(events.at(-1).time, running ? now : 0, t0 + 1e-3);  // no zero-length axis
  const pos = (t) => `${(100 * (t - t0)) / (t1 - t0)}%`;
  uptime.segments.forEach(([start, end], i) => {
    if (running && i === uptime.segments.length - 1) end = now;
    const seg = document.createElement("span");
    seg.className = "segment";
    seg.style.left = pos(start);
    seg.style.width = `${(100 * (end - start)) / (t1 - t0)}%`;
    bar.append(seg);
  });
  const rewinds = new Map(rewindsOf(events).map((r) => [r.time, r]));
  for (const e of events) {
    if (e.kind === "heartbeat") continue;
    const mark = document.createElement("span");
    mark.className = `event ${e.kind}`;
    mark.style.left = pos(e.time);
    const rewind = e.kind === "rewind" ? rewinds.get(e.time) : null;
    mark.title = rewind ? `step ${e.step}: ${rewind.label}` : `${e.kind} at step ${e.step}${e.detail ? ": " + e.detail : ""}`;
    bar.append(mark);
  }
  const label = document.createElement("span");
  label.className = "uptime-label";
  label.textContent = `uptime ${(100 * uptime.ratio).toFixed(1)}% · ${uptime.restarts} restarts` +
                      (rewinds.size ? ` · ${rewinds.size} rewind${rewinds.size > 1 ? "s" : ""}` : "");
  bar.append(label);
  return events;
}


// A run none of whose keys feeds a detector says so (the session's
// "unwatched" event names the keys it saw), instead of looking monitored.
function showUnwatched(events) {
  const note = events.findLast((e) => e.kind === "unwatched");
  const p = $("#unwatched");
  p.hidden = !note;
  p.textContent = note ? note.detail : "";
}
