// What the compare view fetches for each run: a metric as an envelope that
// keeps where its values were not finite, its alert episodes, and the x of
// any of its steps under the chosen alignment (step, tokens, wall time).
import { fetchJson } from "./series.js";

export const runApi = (name, path) => `/api/v1/runs/${encodeURIComponent(name)}${path}`;

// A metric of one run in at most `width` buckets, shaped as series.js's
// loadSeries shapes it ({ key, steps, line, min, max, times, sparse }) plus
//   nonFinite: [{ first, last, kind }], kind "nan", "inf" or "-inf": a bucket
//   that held one. JSON brings NaN as null and infinities as "inf"/"-inf";
//   a bucket's min and max skip NaN, so has_nan is the only trace of one.
export async function loadRunSeries(name, key, width) {
  const body = await fetchJson(runApi(name, `/series?key=${encodeURIComponent(key)}&points=${width}`));
  const s = { key, steps: [], line: [], min: [], max: [], times: [], nonFinite: [] };
  for (const [first, last, min, max, value, hasNan, mean, , lastTime] of body.buckets) {
    s.steps.push(last);
    s.line.push(mean ?? value);
    s.min.push(min);
    s.max.push(max);
    s.times.push(lastTime);
    if (hasNan) s.nonFinite.push({ first, last, kind: "nan" });
    // A bucket of +Inf alone comes with min and max null: its last value
    // and mean say it.
    if ([max, value, mean].includes("inf")) s.nonFinite.push({ first, last, kind: "inf" });
    if ([min, value, mean].includes("-inf")) s.nonFinite.push({ first, last, kind: "-inf" });
  }
  // Sparse (a held-out loss every 250 steps): drawn as measured points, as
  // on the run page.
  const span = s.steps.length > 1 ? s.steps.at(-1) - s.steps[0] + 1 : 1;
  s.sparse = s.steps.length > 1 && s.steps.length < 0.5 * Math.min(span, width);
  return s;
}

// A run's alert episodes, as the server groups them (GET .../alerts
// "episodes": one kind and severity, each alert within 10 steps of the one
// before; telemetry/alert_episodes.h).
export async function loadEpisodes(name) {
  return (await fetchJson(runApi(name, "/alerts"))).episodes;
}

// Tokens seen per step of a run (its last tokens_seen over its steps), or
// null when it never counted tokens.
export async function tokensPerStep(name) {
  const body = await fetchJson(runApi(name, "/series?key=tokens_seen&points=1")).catch(() => null);
  const b = body?.buckets?.at(-1);
  return b && typeof b[4] === "number" ? b[4] / (b[1] + 1) : null;
}

// step -> x of one run under `align`. Wall time is read off the run's own
// series (seconds since its first point, nearest stored step), so it needs
// the series `s`; tokens need the run's tokens per step (steps when null).
export function stepToX(align, s, perStep) {
  if (align === "tokens" && perStep) return (step) => (step + 1) * perStep;
  if (align !== "time") return (step) => step;
  const t0 = s.times.find((t) => typeof t === "number");
  return (step) => {
    if (t0 === undefined || !s.steps.length) return null;
    let lo = 0, hi = s.steps.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (s.steps[mid] < step) lo = mid + 1; else hi = mid;
    }
    const t = s.times[lo];
    return typeof t === "number" ? t - t0 : null;
  };
}
