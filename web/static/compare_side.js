// The compare view's side column: the runs' legend (a run's colour, status,
// alert episodes and first non-finite step; a click shows or hides the run in
// every chart) and the config fields in which the runs that have a config
// differ.
import { runColor } from "./palette.js";

const el = (tag, props = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
};

export function swatch(index) {
  const s = el("span", { className: "swatch" });
  s.style.background = runColor(index);
  return s;
}

// runs: [{ name, index, shown, status, episodes, nonFiniteFrom: [first, last] steps or null }];
// onToggle(run, show) shows or hides one; onAll(show) every run.
export function showLegend(list, runs, { onToggle, onAll }) {
  const items = runs.map((r) => {
    const button = el("button", { type: "button", className: "run-toggle", title: `show or hide ${r.name} in every chart` },
                      swatch(r.index), el("span", { className: "run-name", textContent: r.name }));
    button.setAttribute("aria-pressed", String(r.shown));
    button.dataset.run = r.name;
    button.addEventListener("click", () => onToggle(r, !r.shown));
    const facts = [el("span", { className: `status ${r.status}`, textContent: r.status })];
    if (r.episodes.length)
      facts.push(el("span", { className: "episodes", textContent: `${r.episodes.length} alert episode${r.episodes.length === 1 ? "" : "s"}`,
                              title: r.episodes.slice(0, 20).map((e) => `${e.kind} ${e.severity} ${e.first_step}–${e.last_step}`).join("\n") }));
    // Where it first was not finite, not "from": a one-step Inf the run came back from is not a stretch.
    if (r.nonFiniteFrom) {
      const [first, last] = r.nonFiniteFrom.map((v) => v.toLocaleString("en-US"));
      facts.push(el("span", { className: "nonfinite", textContent: first === last ? `first non-finite at step ${first}`
                                                                                  : `first non-finite in steps ${first}–${last}` }));
    }
    const link = el("a", { href: `/static/run.html?run=${encodeURIComponent(r.name)}`, textContent: "↗", title: `open ${r.name}` });
    return el("li", { className: r.shown ? "" : "off" }, button, " ", link, el("div", { className: "facts" }, ...facts));
  });
  const all = el("button", { type: "button", textContent: "show all" });
  const none = el("button", { type: "button", textContent: "hide all" });
  all.addEventListener("click", () => onAll(true));
  none.addEventListener("click", () => onAll(false));
  list.replaceChildren(el("li", { className: "legend-all" }, all, " ", none), ...items);
}

// Every config leaf as "section.field" -> value text.
function flatten(obj, prefix = "", out = {}) {
  for (const [k, v] of Object.entries(obj ?? {})) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (v && typeof v === "object" && !Array.isArray(v)) flatten(v, key, out);
    else out[key] = JSON.stringify(v);
  }
  return out;
}

// An imported log comes with an empty config: nothing to compare, not
// "identical".
const hasConfig = (r) => r.config && typeof r.config === "object" && Object.keys(r.config).length > 0;

// Fills `table` (#diff) with one block per differing field: the field, then
// each of its values with the runs that have it. `note` says which runs have
// no config, or why there is nothing to list.
export function showConfigDiff(table, note, runs) {
  const having = runs.filter(hasConfig), lacking = runs.filter((r) => !hasConfig(r));
  const without = lacking.length ? `No config: ${lacking.map((r) => r.name).join(", ")}.` : "";
  table.tBodies[0].replaceChildren();
  if (having.length < 2) {
    table.hidden = true;
    note.textContent = `Fewer than two of these runs have a config, so there is nothing to compare. ${without}`;
    return;
  }
  const flat = having.map((r) => flatten(r.config));
  // Where a run lives is not a difference.
  const ignore = new Set(["run.name", "run.out_dir"]);
  const keys = [...new Set(flat.flatMap(Object.keys))].sort()
    .filter((k) => !ignore.has(k) && new Set(flat.map((f) => f[k])).size > 1);
  table.hidden = keys.length === 0;
  note.textContent = keys.length ? without
    : `The configs of ${having.length === runs.length ? "these runs" : having.map((r) => r.name).join(", ")} are identical. ${without}`;
  const rows = [];
  for (const k of keys) {
    rows.push(el("tr", { className: "field" }, el("th", { colSpan: 2, textContent: k })));
    const byValue = new Map();
    having.forEach((r, i) => {
      const v = flat[i][k] ?? "-";
      if (!byValue.has(v)) byValue.set(v, []);
      byValue.get(v).push(r);
    });
    for (const [v, who] of byValue)
      rows.push(el("tr", {}, el("td", { className: "value", textContent: v }),
                   // Each run's swatch and name kept together: a line break between them would pair the
                   // swatch with the run before it.
                   el("td", { className: "who" }, ...who.map((r) => el("span", { className: "who-run" }, swatch(r.index), r.name)))));
  }
  table.tBodies[0].replaceChildren(...rows);
}
