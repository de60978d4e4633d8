// What the cursor reads on a run chart: the data under it, not the drawn
// line. At full resolution a point's value; over downsampled buckets (those
// within a pixel or so of the cursor: at full zoom-out each is about a pixel
// wide) their min, max and last value and the steps they span, so hovering a
// one-step spike reads the spike's height, not a bucket's mean. Values that
// are not finite read NaN, +Inf, -Inf.
import { nonFiniteAt } from "./series.js";

const num = (v) => (v === null ? "NaN" : v === "inf" ? "+Inf" : v === "-inf" ? "-Inf"
                    : typeof v === "number" ? Number(v.toPrecision(4)).toString() : "");

const read = (v) => (v === "inf" ? Infinity : v === "-inf" ? -Infinity : typeof v === "number" ? v : null);
const show = (v) => (v === Infinity ? "+Inf" : v === -Infinity ? "-Inf" : num(v));

// Indices of the elements of s drawn at steps lo..hi (each at its last step).
function within(s, lo, hi) {
  let a = 0, b = s.steps.length;
  while (a < b) {
    const mid = (a + b) >> 1;
    if (s.steps[mid] < lo) a = mid + 1; else b = mid;
  }
  const out = [];
  for (let j = a; j < s.steps.length && s.steps[j] <= hi; j++) out.push(j);
  return out;
}

// One key's line over elements js: a point's value, or the min, max and
// last value of the buckets (NaN where a bucket holds nothing else).
function keyLine(key, s, js) {
  const bad = [...new Set(js.flatMap((j) => nonFiniteAt(s, j).split(" ").filter(Boolean)))].join(" ");
  const note = bad ? ` (${bad} here)` : "";
  const j = js.at(-1);
  if (js.length === 1 && s.first[j] === s.steps[j]) return `${key}: ${num(s.last[j])}`;
  let max = null, min = null;
  for (const k of js) {
    const hi = read(s.max[k]), lo = read(s.min[k]);
    if (hi !== null) max = max === null ? hi : Math.max(max, hi);
    if (lo !== null) min = min === null ? lo : Math.min(min, lo);
  }
  if (max === null && min === null && bad) return `${key}: ${bad} only, no finite value here`;  // not "max NaN · min NaN"
  return `${key}: max ${show(max)} · min ${show(min)} · last ${num(s.last[j])}${note}`;
}

// Lines of text for the keys of a chart over the elements drawn at steps
// lo..hi (those under the cursor's pixel, each ~1 px wide at full
// zoom-out): the steps they span first, then one line per key.
export function hoverLines(keys, seriesOf, lo, hi) {
  const lines = [];
  let first = Infinity, last = -Infinity;
  for (const key of keys) {
    const s = seriesOf(key);
    const js = s ? within(s, lo, hi) : [];
    if (!js.length) continue;
    first = Math.min(first, s.first[js[0]]);
    last = Math.max(last, s.steps[js.at(-1)]);
    lines.push(keyLine(key, s, js));
  }
  if (!lines.length) return [];
  const at = (x) => x.toLocaleString("en-US");
  return [first === last ? `step ${at(first)}` : `steps ${at(first)}–${at(last)}`, ...lines];
}

// The tip of one chart (chart_tools.js): the value lines and, under them,
// `mark` (the alert episode or rewind under the cursor, in .alert-tip);
// beside the cursor, on its left near the right edge.
export function showHoverTip(tip, u, lines, mark) {
  if ((!lines.length && !mark) || u.cursor.left < 0) {
    tip.style.display = "none";
    return;
  }
  tip.querySelector(".lines").replaceChildren(...lines.map((text, i) =>
    Object.assign(document.createElement("div"), { textContent: text, className: i ? "" : "span" })));
  const alert = tip.querySelector(".alert-tip");
  alert.textContent = mark;
  alert.style.display = mark ? "block" : "none";
  tip.style.display = "block";
  const box = tip.offsetParent.getBoundingClientRect(), over = u.over.getBoundingClientRect();
  const x = over.left - box.left + u.cursor.left;
  const right = x + 16 + tip.offsetWidth > box.width;
  tip.style.left = `${right ? Math.max(0, x - 16 - tip.offsetWidth) : x + 16}px`;
  tip.style.top = `${over.top - box.top + 28}px`;
}
