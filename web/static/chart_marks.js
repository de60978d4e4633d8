// What the run page draws over a chart's data (uPlot draw hooks): alert
// episodes, values that are not finite, grad-norm spike shading (and which
// spikes deserve it) and rewind_skip's rewinds. Each hook reads a `view`:
//   x(step, time?): the step's x on the chart's axis (steps, tokens or wall
//     time; the time is looked up when not given), or null;
//   episodes: alert episodes (the alerts API's); shaded: spike episodes as
//     [first, last, peak_step, peak]; rewinds: attribution.js rewindsOf();
//   rewindXs(r): [x of the alert, x of the restart].
export const RED = "#cf222e", NONFINITE = "#a40e26", REWIND = "#8250df";

const inPlot = (u, px) => px >= u.bbox.left && px <= u.bbox.left + u.bbox.width;
const clampX = (u, px) => Math.min(u.bbox.left + u.bbox.width, Math.max(u.bbox.left, px));

function triangle(ctx, px, top, half, depth) {
  ctx.beginPath();
  ctx.moveTo(px - half, top);
  ctx.lineTo(px + half, top);
  ctx.lineTo(px, top + depth);
  ctx.closePath();
  ctx.fill();
}

// One mark per episode. A single alert: a red triangle on the top edge and a
// translucent line down the chart, so the data under it stays visible. A
// stretch of alerts: the same at its first step, a pale band to its last and
// a red strip along the top. An info episode (a one-step outlier, a note): a
// small grey triangle only.
export function episodeMarks(u, view) {
  const ctx = u.ctx, dpr = devicePixelRatio, { top, height } = u.bbox;
  ctx.save();
  ctx.lineWidth = dpr;
  for (const e of view.episodes) {
    const xa = view.x(e.first_step);
    if (xa === null) continue;
    const pa = u.valToPos(xa, "x", true);
    if (e.severity === "info") {
      if (!inPlot(u, pa)) continue;
      ctx.fillStyle = "rgba(87, 96, 106, 0.5)";
      triangle(ctx, pa, top, 3.5 * dpr, 6 * dpr);
      continue;
    }
    const xb = e.last_step > e.first_step ? view.x(e.last_step) : null;
    if (xb !== null) {
      const a = clampX(u, pa), b = clampX(u, Math.max(u.valToPos(xb, "x", true), pa + dpr));
      ctx.fillStyle = "rgba(207, 34, 46, 0.10)";
      ctx.fillRect(a, top, b - a, height);
      ctx.fillStyle = RED;
      ctx.fillRect(a, top, Math.max(b - a, dpr), 3 * dpr);
    }
    if (!inPlot(u, pa)) continue;
    ctx.strokeStyle = "rgba(207, 34, 46, 0.45)";
    ctx.beginPath();
    ctx.moveTo(pa, top);
    ctx.lineTo(pa, top + height);
    ctx.stroke();
    ctx.fillStyle = RED;
    triangle(ctx, pa, top, 5 * dpr, 8 * dpr);
  }
  ctx.restore();
}

// Values that are not finite, from a panel's `bad` list (series.js
// nonFiniteOf, every key of the panel): a hatched band from the first one to
// the plot's right edge, labelled with its step, and a diamond at the bottom
// edge under each, named (NaN, +Inf, -Inf).
export function nonFiniteMarks(u, bad, view) {
  if (!bad.length) return;
  const ctx = u.ctx, dpr = devicePixelRatio, { left, top, width, height } = u.bbox;
  const first = bad.reduce((a, b) => (b.first < a.first ? b : a));
  const x0 = view.x(first.first, first.firstTime);
  ctx.save();
  ctx.textAlign = "left";
  ctx.textBaseline = "alphabetic";
  if (x0 !== null) {
    const a = clampX(u, u.valToPos(x0, "x", true));
    ctx.fillStyle = "rgba(164, 14, 38, 0.07)";
    ctx.fillRect(a, top, left + width - a, height);
    ctx.strokeStyle = NONFINITE;
    ctx.lineWidth = dpr;
    dashedVertical(ctx, a, top, height, [3 * dpr, 3 * dpr]);
    ctx.fillStyle = NONFINITE;
    ctx.font = `${11 * dpr}px sans-serif`;
    // A bucket says where its first NaN or infinity is only to its steps.
    const [f, l] = [first.first, first.step].map((v) => v.toLocaleString("en-US"));
    const label = f === l ? `not finite from step ${f}` : `not finite from a step in ${f}–${l}`;
    const w = ctx.measureText(label).width;
    ctx.fillText(label, Math.min(a + 4 * dpr, left + width - w - 2 * dpr), top + 24 * dpr);
  }
  ctx.fillStyle = NONFINITE;
  ctx.font = `${10 * dpr}px sans-serif`;
  const bottom = top + height;
  // Named at the start of each stretch of them, where there is room.
  let lastLabel = -Infinity, lastPx = -Infinity;
  for (const b of bad) {
    const x = view.x(b.step, b.time);
    if (x === null) continue;
    const px = u.valToPos(x, "x", true);
    if (!inPlot(u, px)) continue;
    const stretch = px - lastPx < 8 * dpr;
    lastPx = px;
    ctx.beginPath();
    ctx.moveTo(px, bottom - 9 * dpr);
    ctx.lineTo(px + 4 * dpr, bottom - 4.5 * dpr);
    ctx.lineTo(px, bottom);
    ctx.lineTo(px - 4 * dpr, bottom - 4.5 * dpr);
    ctx.closePath();
    ctx.fill();
    if (stretch || px - lastLabel < 40 * dpr) continue;
    // A light halo: the label sits where a line near the plot's floor runs.
    ctx.strokeStyle = "rgba(255, 255, 255, 0.9)";
    ctx.lineWidth = 3 * dpr;
    ctx.lineJoin = "round";
    ctx.strokeText(b.what, px + 5 * dpr, bottom - 10 * dpr);
    ctx.fillText(b.what, px + 5 * dpr, bottom - 10 * dpr);
    lastLabel = px;
  }
  ctx.restore();
}

// Grad-norm spike episodes ([first, last, peak_step, peak], GET .../episodes)
// worth shading: those an alert episode (not a note) touches, and those
// whose peak is at least `ratio` times the level before them (the median of
// series s's 20 elements before the episode). A healthy run's noisy first
// steps then stay clear instead of solid orange.
export function spikesToShade(spikes, alertEpisodes, s, ratio) {
  const alerted = alertEpisodes.filter((e) => e.severity !== "info");
  return spikes.filter(([first, last, , peak]) => {
    if (typeof peak !== "number") return false;  // NaN or Inf: nonFiniteMarks() draws it
    if (alerted.some((e) => e.first_step <= last + 1 && e.last_step >= first - 1)) return true;
    if (!s) return false;
    const level = levelBefore(s, first);
    return level > 0 && peak >= ratio * level;
  });
}

function levelBefore(s, step) {
  let end = 0, hi = s.steps.length;  // end: the first element at or after `step`
  while (end < hi) {
    const mid = (end + hi) >> 1;
    if (s.steps[mid] < step) end = mid + 1; else hi = mid;
  }
  const before = s.line.slice(Math.max(0, end - 20), end).filter(Number.isFinite).sort((a, b) => a - b);
  return before.length ? before[before.length >> 1] : null;
}

// The spike episodes spikesToShade() picked, as orange bands.
export function shadeSpikes(u, view) {
  const ctx = u.ctx;
  ctx.save();
  ctx.fillStyle = "rgba(212, 119, 12, 0.18)";
  for (const [first, last] of view.shaded) {
    const xa = view.x(first), xb = view.x(last);
    if (xa === null || xb === null) continue;
    const left = u.valToPos(xa, "x", true), right = Math.max(u.valToPos(xb, "x", true), left + 2 * devicePixelRatio);
    ctx.fillRect(left, u.bbox.top, right - left, u.bbox.height);
  }
  ctx.restore();
}

// Each rewind: a dashed purple line at the step training restarted from and
// an arrow back to it from the alert's step, under the alert's triangle: the
// steps in between were trained again, without the skipped batches. By wall
// time, where nothing goes back, the line only, at the rewind.
export function rewindMarks(u, view) {
  const ctx = u.ctx, dpr = devicePixelRatio, { left, top, width, height } = u.bbox;
  const y = top + 12 * dpr;
  ctx.save();
  ctx.strokeStyle = REWIND;
  ctx.fillStyle = REWIND;
  ctx.lineWidth = 1.5 * dpr;
  for (const r of view.rewinds) {
    const [xa, xr] = view.rewindXs(r);
    if (xr === null) continue;
    const pr = u.valToPos(xr, "x", true);
    if (pr >= left && pr <= left + width) {
      dashedVertical(ctx, pr, top, height, [4 * dpr, 3 * dpr]);
    }
    if (xa === null) continue;
    const a = clampX(u, u.valToPos(xa, "x", true)), b = clampX(u, pr);
    if (a === b) continue;
    ctx.beginPath();
    ctx.moveTo(a, y);
    ctx.lineTo(b, y);
    ctx.stroke();
    if (b !== pr) continue;
    ctx.beginPath();
    ctx.moveTo(pr, y);
    ctx.lineTo(pr + 6 * dpr, y - 4 * dpr);
    ctx.lineTo(pr + 6 * dpr, y + 4 * dpr);
    ctx.closePath();
    ctx.fill();
  }
  ctx.restore();
}

// What the cursor at `left` (CSS pixels in the plot) is on: an alert episode
// (and the rewind it caused), or a rewind's restart line; "" when nothing.
export function markTip(u, left, view) {
  const pos = (x) => (x === null || x === undefined ? null : u.valToPos(x, "x"));
  const near = (x) => pos(x) !== null && Math.abs(pos(x) - left) < 5;
  const e = view.episodes.find((ep) => {
    const a = pos(view.x(ep.first_step));
    if (a === null) return false;
    const b = ep.last_step > ep.first_step ? pos(view.x(ep.last_step)) ?? a : a;
    return left > a - 5 && left < b + 5;
  });
  const rewind = view.rewinds.find((r) => (e ? r.step >= e.first_step && r.step <= e.last_step && r.kind === e.kind
                                              : near(view.rewindXs(r)[1])));
  if (e) {
    const where = e.count > 1 ? `steps ${e.first_step}–${e.last_step}: ${e.kind} ×${e.count}` : `step ${e.first_step}: ${e.kind}`;
    return `${where} — ${e.message}${rewind ? ` · ${rewind.label}` : ""}`;
  }
  return rewind ? rewind.label : "";
}

// A dashed vertical line across the plot at canvas x (the start of a non-finite band, a rewind).
function dashedVertical(ctx, x, top, height, dash) {
  ctx.setLineDash(dash);
  ctx.beginPath();
  ctx.moveTo(x, top);
  ctx.lineTo(x, top + height);
  ctx.stroke();
  ctx.setLineDash([]);
}
