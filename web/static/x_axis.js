// The run page's x axis: steps, tokens or wall time, and what it falls back
// to when the run cannot give the one chosen.

// Why the series' wall times are not real, or "" when they are: between
// 2000 and a day from now, and not all the same. An imported log without
// times has 1970, or the years ahead an offset put them in.
export function timesProblem(series) {
  const times = Object.values(series).flatMap((s) => [s.times[0], s.times.at(-1)]).filter(Number.isFinite);
  if (!times.length) return "not recorded by this run";
  const lo = Math.min(...times), hi = Math.max(...times), day = (t) => new Date(t * 1000).toISOString().slice(0, 10);
  if (lo < Date.UTC(2000, 0, 1) / 1000) return `times are not real (${day(lo)})`;
  if (hi > Date.now() / 1000 + 86400) return `times are not real (${day(hi)}, in the future)`;
  if (hi === lo) return "times are all the same";
  return "";
}

// The axis drawn for the one `wanted`, and the reason when it is not that one:
// { axis, reason }.
export function axisFor(wanted, { tokensPerStep, timesProblem: problem }) {
  if (wanted === "tokens" && !tokensPerStep) return { axis: "step", reason: "tokens: not recorded by this run, showing steps" };
  if (wanted === "time" && problem) return { axis: "step", reason: `wall time: ${problem}, showing steps` };
  return { axis: wanted, reason: "" };
}

// Wall time of a step: that of the element holding it in a loaded series
// (a bucket's last time), or null past their ends.
export function timeAt(series, step) {
  for (const s of Object.values(series)) {
    const { steps } = s;
    if (!steps.length || step > steps.at(-1) || step < s.first[0]) continue;
    let lo = 0, hi = steps.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (steps[mid] < step) lo = mid + 1; else hi = mid;
    }
    if (Number.isFinite(s.times[lo])) return s.times[lo];
  }
  return null;
}
