// Alerts grouped into episodes: a run whose gradients went NaN at step 900
// and stayed so may hold an alert per step, and the page draws and lists one
// "nonfinite ×600, steps 900–1499" instead of 600. An episode is a stretch of
// alerts of one kind and severity, each within EPISODE_GAP steps of the one
// before (telemetry/alert_episodes.h, the server's rule).
export const EPISODE_GAP = 10;

// The run's episodes: the server's (GET .../alerts sends "episodes", over all
// the run's alerts), or, from a server that does not send them, grouped here
// from the alerts it lists.
export function episodesOf(reply) {
  return Array.isArray(reply.episodes) ? reply.episodes : groupAlerts(reply.alerts ?? []);
}

// The number an alert is judged by, as the server picks it: the first of its
// data's fields below that is present; NaN for null or "nan", ±Infinity for
// "inf"/"-inf"; undefined when it has none.
const VALUE_FIELDS = ["ratio", "loss", "norm", "value", "drift", "grad_norm"];
function alertValue(a) {
  const data = a.data && typeof a.data === "object" ? a.data : {};
  for (const f of VALUE_FIELDS) {
    if (!(f in data)) continue;
    return readNumber(data[f]);
  }
  return undefined;
}

const readNumber = (v) => (v === null || v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity : Number(v));
const severity = (v) => (Number.isFinite(v) ? v : Infinity);  // a non-finite value is the worst
const asJson = (v) => (Number.isNaN(v) ? "nan" : v === Infinity ? "inf" : v === -Infinity ? "-inf" : v);

export function groupAlerts(alerts) {
  const out = [];
  const open = new Map();  // kind and severity -> the newest episode of them
  for (const a of [...alerts].sort((x, y) => x.step - y.step)) {
    const id = `${a.kind}\u0000${a.severity}`;
    let e = open.get(id);
    if (!e || a.step - e.last_step > EPISODE_GAP) {
      e = { kind: a.kind, severity: a.severity, first_step: a.step, last_step: a.step, count: 0,
            worst_step: a.step, worst_value: null, message: a.message };
      out.push(e);
      open.set(id, e);
    }
    e.last_step = a.step;
    e.count++;
    const v = alertValue(a);
    if (v === undefined) continue;
    if (e.worst_value === null || severity(v) > severity(readNumber(e.worst_value))) {
      e.worst_value = asJson(v);
      e.worst_step = a.step;
      e.message = a.message;
    }
  }
  return out;
}

// The alerts (of those the server listed) that make up an episode.
export const alertsOf = (e, alerts) =>
  alerts.filter((a) => a.kind === e.kind && a.severity === e.severity && a.step >= e.first_step && a.step <= e.last_step);

export const episodeId = (e) => `${e.kind}@${e.severity}@${e.first_step}`;

// A value as read: "NaN", "+Inf", "-Inf", or four significant digits.
export function valueText(v) {
  if (v === null || v === undefined) return "";
  const n = readNumber(v);
  if (Number.isNaN(n)) return "NaN";
  if (!Number.isFinite(n)) return n > 0 ? "+Inf" : "-Inf";
  return Number(n.toPrecision(4)).toString();
}

// "nonfinite ×600, steps 900–1499, worst NaN at step 900" (a single alert: "step 60 · grad_spike").
export function episodeTitle(e) {
  if (e.count === 1) return `step ${e.first_step} · ${e.kind}`;
  const worst = valueText(e.worst_value);
  return `${e.kind} ×${e.count}, steps ${e.first_step}–${e.last_step}${worst ? `, worst ${worst} at step ${e.worst_step}` : ""}`;
}
