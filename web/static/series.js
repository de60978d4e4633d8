// What the run page and the compare view share: a series as envelopes (every
// downsampled bucket keeps its min and max, so a one-step event shows at any
// zoom), TensorBoard's smoothing, and the uPlot series that draw them.
export const COLORS = ["#1f6feb", "#d4770c", "#2da44e", "#8250df", "#cf222e", "#57606a"];

export async function fetchJson(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// A metric of one run over [from, to] (the whole run when absent), as
//   { key, steps, first, line, min, max, last, nan, times, firstTimes, bucketed, sparse, bucketSteps }
// At most `width` buckets: each is drawn at its last step, its line is the
// bucket's mean, its band min..max, `last` its last value, `first` its first
// step, `nan` whether it holds a NaN, its time the wall time of its last step.
// Ranges narrower than twice the width come as stored points (line = min =
// max = last). Values are as the API sends them: NaN as null, infinities as
// the strings "inf" and "-inf" (nonFiniteAt() reads them).
const FIELDS = ["steps", "first", "line", "min", "max", "last", "nan", "times", "firstTimes"];
const emptySeries = (key, bucketed) => Object.assign({ key, bucketed }, Object.fromEntries(FIELDS.map((f) => [f, []])));
const pushPoint = (s, step, value, time) => {
  s.steps.push(step); s.first.push(step); s.line.push(value); s.min.push(value); s.max.push(value);
  s.last.push(value); s.nan.push(value === null); s.times.push(time); s.firstTimes.push(time);
};

export async function loadSeries(runBase, key, { from, to, width }) {
  const range = from !== undefined ? `&from=${from}&to=${to}` : "";
  const narrow = from !== undefined && to - from + 1 <= width * 2;
  const body = await fetchJson(`${runBase}/series?key=${encodeURIComponent(key)}${range}${narrow ? "" : `&points=${width}`}`);
  const s = emptySeries(key, !body.points);
  if (body.points) {
    for (const [step, value, time] of body.points) pushPoint(s, step, value, time);
  } else {
    for (const [first, last, min, max, value, hasNan, mean, firstTime, lastTime] of body.buckets) {
      s.steps.push(last); s.first.push(first); s.line.push(mean ?? value); s.min.push(min); s.max.push(max);
      s.last.push(value); s.nan.push(Boolean(hasNan)); s.times.push(lastTime); s.firstTimes.push(firstTime);
    }
  }
  // Sparse: far fewer points than steps (or buckets) in its span, e.g. a
  // held-out loss every 250 steps. Drawn as measured, never smoothed.
  const span = s.steps.length > 1 ? s.steps.at(-1) - s.steps[0] + 1 : 1;
  s.sparse = s.steps.length > 1 && s.steps.length < 0.5 * Math.min(span, width);
  s.bucketSteps = s.bucketed && s.steps.length > 1 ? Math.max(1, Math.round(span / s.steps.length)) : 1;
  return s;
}

// A point that arrived live. It folds into a trailing bucket as wide as the
// loaded ones (min, max, running mean, last step, value and time), so a page
// left open on a fast run grows by buckets, not by steps; a non-finite value
// (the stream sends NaN as null) always gets an element of its own.
export function appendLive(s, step, value, time) {
  const n = s.steps.length;
  const fold = s.tailCount > 0 && step - s.tailStart < s.bucketSteps &&
               Number.isFinite(value) && Number.isFinite(s.line[n - 1]);
  if (!fold) {
    pushPoint(s, step, value, time);
    s.tailStart = step;
    s.tailCount = 1;
    return;
  }
  s.tailCount++;
  s.line[n - 1] += (value - s.line[n - 1]) / s.tailCount;
  s.min[n - 1] = Math.min(s.min[n - 1], value);
  s.max[n - 1] = Math.max(s.max[n - 1], value);
  s.last[n - 1] = value;
  s.steps[n - 1] = step;
  s.times[n - 1] = time;
}

// Elements of `old` after the last step of `fresh` (points that arrived live
// while `fresh` was being fetched), appended to `fresh`.
export function carryLive(old, fresh) {
  if (!old) return;
  const last = fresh.steps.length ? fresh.steps.at(-1) : -1;
  for (let i = 0; i < old.steps.length; i++) {
    if (old.steps[i] <= last) continue;
    for (const f of FIELDS) fresh[f].push(old[f][i]);
  }
}

// JSON carries infinities as strings and NaN as null: numbers or null here.
export const finite = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

// What is not finite in element j of a series: "NaN", "+Inf", "-Inf" (joined
// by spaces when a bucket holds several), or "" when everything is finite.
export function nonFiniteAt(s, j) {
  const what = [];
  if (s.nan[j]) what.push("NaN");
  if (s.max[j] === "inf" || s.line[j] === "inf" || s.last[j] === "inf") what.push("+Inf");
  if (s.min[j] === "-inf" || s.line[j] === "-inf" || s.last[j] === "-inf") what.push("-Inf");
  return what.join(" ");
}

// Every element of a series holding a NaN or an infinity, in step order:
// [{ step (where it is drawn), first (its first step), time, firstTime, what }].
export function nonFiniteOf(s) {
  const out = [];
  for (let j = 0; j < s.steps.length; j++) {
    const what = nonFiniteAt(s, j);
    if (what) out.push({ step: s.steps[j], first: s.first[j], time: s.times[j], firstTime: s.firstTimes[j], what });
  }
  return out;
}

// TensorBoard's smoothing: an exponential moving average debiased by
// 1 - weight^n, so the start is not pulled toward zero; non-finite values
// pass through without touching the average.
export function smooth(values, weight) {
  if (weight <= 0) return values;
  let acc = 0, n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    acc = acc * weight + (1 - weight) * v;
    n++;
    return acc / (1 - Math.pow(weight, n));
  });
}

// uPlot series and bands for one metric on a chart whose x values are `xs`
// (the union of the chart's steps): the min-max envelope as a band, the line
// thin and, when smoothing and dense, the smoothed line on top.
// An x where the metric has no element is undefined (uPlot joins across it);
// a non-finite value is null, a gap: the line is never drawn across a NaN.
// Returns { data: [arrays], series: [options], bands: [{series: [i, j]}] } to
// append after the chart's first `offset` series.
export function envelopeParts(s, xs, { color, smoothing, label = s.key, log = false, offset }) {
  const index = new Map(s.steps.map((step, j) => [step, j]));
  const pick = (arr) => xs.map((x) => {
    const j = index.get(x);
    if (j === undefined) return undefined;
    const v = finite(arr[j]);
    return log && v !== null && v <= 0 ? undefined : v;
  });
  const line = pick(s.line), min = pick(s.min), max = pick(s.max);
  // The envelope's edges are drawn too: a one-step spike in a bucket a pixel
  // wide is a thin band, and its edge line is what the eye finds.
  const edge = (name) => ({ label: name, class: "band-edge", stroke: color + "aa", width: 1, points: { show: false } });
  const data = [max, min];
  const series = [edge(`${label} max`), edge(`${label} min`)];
  const bands = [{ series: [offset, offset + 1], fill: color + "33" }];
  if (s.sparse) {
    data.push(line);
    series.push({ label, stroke: color, width: 2, points: { show: true, size: 5 } });
  } else if (smoothing > 0) {
    data.push(line, smooth(line, smoothing));
    series.push({ label: `${label} (raw)`, stroke: color + "66", width: 1 },
                { label, stroke: color, width: 2 });
  } else {
    data.push(line);
    series.push({ label, stroke: color, width: 1.5 });
  }
  return { data, series, bands };
}

// Axis labels that stay readable from 3e-5 (a learning rate) to 1e6 (tokens),
// with as many decimals as the spacing between ticks needs.
export function tick(v, incr) {
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-2) return v.toExponential(1);
  if (incr > 0) return v.toFixed(Math.min(6, Math.max(0, Math.ceil(-Math.log10(incr)))));
  return Number(v.toPrecision(3)).toString();
}
export const yTicks = (u, vals, axis, space, incr) => vals.map((v) => (v === null ? "" : tick(v, incr)));

// A y range over the values at x >= fromX only (the "ignore warmup" fit),
// padded by 5%; uPlot's own range when nothing is left.
export function rangeFrom(fromX) {
  return (u, dataMin, dataMax) => {
    if (fromX === null || fromX === undefined) return [dataMin, dataMax];
    let lo = Infinity, hi = -Infinity;
    const xs = u.data[0];
    for (let i = 1; i < u.data.length; i++) {
      if (u.series[i] && u.series[i].show === false) continue;
      const ys = u.data[i];
      for (let j = 0; j < xs.length; j++) {
        const y = ys[j];
        if (xs[j] >= fromX && y !== null && Number.isFinite(y)) { lo = Math.min(lo, y); hi = Math.max(hi, y); }
      }
    }
    if (lo === Infinity) return [dataMin, dataMax];
    const pad = (hi - lo) * 0.05 || Math.abs(hi) * 0.05 || 1;
    return [lo - pad, hi + pad];
  };
}

// Log y. The range is the data's (from fromX on, when given), padded by 5%
// in log space, not widened to whole decades: data up to 15 is not drawn on
// 0.2-100. Ticks: decades over 3 decades or more; 1, 2, 5 per decade down to
// 1.5 decades; every integer mantissa below that; and evenly spaced values
// when even those leave fewer than three in the range.
export function logRange(fromX) {
  return (u, dataMin, dataMax) => {
    let lo = dataMin, hi = dataMax;
    if (fromX !== null && fromX !== undefined) {
      const xs = u.data[0];
      let a = Infinity, b = -Infinity;
      for (let i = 1; i < u.data.length; i++) {
        if (u.series[i] && u.series[i].show === false) continue;
        u.data[i].forEach((y, j) => { if (xs[j] >= fromX && y > 0 && Number.isFinite(y)) a = Math.min(a, y), b = Math.max(b, y); });
      }
      if (a !== Infinity) lo = a, hi = b;
    }
    if (!(lo > 0) || !(hi > 0)) return [1, 10];
    const pad = Math.max(0.02, 0.05 * Math.log10(hi / lo));
    return [lo / 10 ** pad, hi * 10 ** pad];
  };
}

export function logSplits(u, axisIdx, min, max) {
  const decades = Math.log10(max / min);
  const mantissas = decades >= 3 ? [1] : decades >= 1.5 ? [1, 2, 5] : [1, 2, 3, 4, 5, 6, 7, 8, 9];
  const out = [];
  for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) {
    for (const m of mantissas) {
      const v = Number((m * 10 ** e).toPrecision(6));
      if (v >= min && v <= max) out.push(v);
    }
  }
  if (decades >= 3 && out.length > 8) return out.filter((v, i) => i % Math.ceil(out.length / 8) === 0);
  if (out.length >= 3) return out;
  const step = niceStep((max - min) / 4);
  const even = [];
  for (let v = Math.ceil(min / step) * step; v <= max; v += step) even.push(Number(v.toPrecision(6)));
  return even;
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * p;
}

export const logTicks = (u, vals) => vals.map((v) => (v === null ? "" : tick(v)));
