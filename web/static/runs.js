// The runs list: one row per run from /api/v1/runs, refreshed every 5 s;
// filtered by name, status, precision or tag, sorted by any column, with
// each run's tags and note (edited in place with the server's token), a
// checkbox per run to compare the chosen ones, and a banner while the store
// cannot be written. A refresh redraws the rows only when something in them
// changed, and an open editor (its text, its message) goes back in as it was.
import { showStoreHealth } from "./store_health.js";
import { runEditor } from "./run_editor.js";

const $ = (sel) => document.querySelector(sel);
const body = $("#runs tbody");
const message = $("#message");
const COLUMNS = 10;
const selected = new Set();
const editors = new Map();  // run name -> its open editor row
const view = { sort: "started_at", dir: -1, runs: [], shown: [], drawn: "" };

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function fmt(v, digits) {
  return v === null || v === undefined ? "-" : Number(v).toFixed(digits);
}

// A run matches when every word of the filter is in its name, status,
// precision or one of its tags ("bf16 running", "tag:baseline" reads as "baseline").
function matches(r, filter) {
  const hay = [r.name, r.status, r.precision || "", ...(r.tags || [])].join(" ").toLowerCase();
  return filter.toLowerCase().split(/\s+/).filter(Boolean).every((w) => hay.includes(w.replace(/^tag:/, "")));
}

function toggleEditor(r) {
  if (editors.has(r.name)) editors.delete(r.name);
  else editors.set(r.name, runEditor(r, COLUMNS, () => { editors.delete(r.name); view.drawn = ""; refresh(); }));
  view.drawn = "";
  show();
}

function row(r) {
  const tr = document.createElement("tr");
  tr.dataset.run = r.name;
  const name = document.createElement("td");
  const link = Object.assign(document.createElement("a"), { href: `/static/run.html?run=${encodeURIComponent(r.name)}`,
                                                             textContent: r.name });
  name.append(link, " ", ...(r.tags || []).map((t) => Object.assign(document.createElement("span"), { className: "tag", textContent: t })));
  const pick = document.createElement("td");
  const box = Object.assign(document.createElement("input"), { type: "checkbox", value: r.name, checked: selected.has(r.name),
                                                               title: `compare ${r.name}` });
  box.addEventListener("change", () => {
    if (box.checked) selected.add(r.name); else selected.delete(r.name);
    selectionChanged();
  });
  pick.append(box);
  const note = cell(r.note || "", "note");
  const edit = Object.assign(document.createElement("button"), { type: "button", textContent: "✎", title: "edit tags and note" });
  edit.setAttribute("aria-expanded", String(editors.has(r.name)));
  edit.addEventListener("click", () => toggleEditor(r));
  note.prepend(edit, " ");
  tr.append(pick, name, cell(r.status, `status ${r.status}`), cell(r.precision || "-"), cell(r.steps),
            cell(fmt(r.last_loss, 4)), cell(r.tokens === null ? "-" : Number(r.tokens).toExponential(2)),
            cell(r.uptime === null ? "-" : `${(100 * r.uptime).toFixed(1)}%`),
            cell(r.alerts, r.alerts > 0 ? "alerts" : ""), note);
  return tr;
}

// Puts the rows back, each open editor under its run; the element that had
// the focus (a half-typed field) gets it back with its caret.
function putRows(runs) {
  const focused = body.contains(document.activeElement) ? document.activeElement : null;
  const caret = focused && "selectionStart" in focused ? [focused.selectionStart, focused.selectionEnd] : null;
  body.replaceChildren(...runs.flatMap((r) => (editors.has(r.name) ? [row(r), editors.get(r.name)] : [row(r)])));
  if (focused && body.contains(focused)) {
    focused.focus();
    if (caret) try { focused.setSelectionRange(...caret); } catch { /* not a text field */ }
  }
}

function show() {
  const filter = $("#filter").value;
  const key = view.sort;
  const runs = view.runs.filter((r) => matches(r, filter) || editors.has(r.name)).sort((a, b) => {
    const x = a[key] ?? -Infinity, y = b[key] ?? -Infinity;
    return (x < y ? -1 : x > y ? 1 : 0) * view.dir;
  });
  view.shown = runs.map((r) => r.name);
  const drawn = JSON.stringify([runs, key, view.dir]);
  if (drawn !== view.drawn) putRows(runs);
  view.drawn = drawn;
  for (const th of document.querySelectorAll("th.sortable")) {
    th.classList.toggle("asc", th.dataset.key === key && view.dir > 0);
    th.classList.toggle("desc", th.dataset.key === key && view.dir < 0);
  }
  message.textContent = view.runs.length ? (runs.length ? "" : "No run matches the filter.") : "No runs yet.";
  selectionChanged();
}

function selectionChanged() {
  for (const name of [...selected]) if (!view.runs.some((r) => r.name === name)) selected.delete(name);
  const hiddenPicks = [...selected].filter((n) => !view.shown.includes(n)).length;
  $("#compare").textContent = `Compare ${selected.size} selected`;
  $("#compare").disabled = selected.size < 2;
  $("#selection-note").textContent = hiddenPicks ? `(${hiddenPicks} not shown by the filter)` : "";
  for (const box of body.querySelectorAll("input[type=checkbox]")) box.checked = selected.has(box.value);
}

async function refresh() {
  showStoreHealth($("#store-health"));
  try {
    const response = await fetch("/api/v1/runs");
    if (!response.ok) throw new Error((await response.json()).error);
    view.runs = (await response.json()).runs;
    show();
  } catch (e) {
    message.textContent = `Cannot read the runs: ${e.message}`;
  }
}

// The compare view's runs: in the list's order, then any chosen run the
// filter hides (the order gives each run its colour there).
$("#compare").addEventListener("click", () => {
  const order = [...view.shown.filter((n) => selected.has(n)), ...[...selected].filter((n) => !view.shown.includes(n))];
  location.href = `/static/compare.html?runs=${order.map(encodeURIComponent).join(",")}`;
});
$("#select-shown").addEventListener("click", () => {
  for (const name of view.shown) selected.add(name);
  selectionChanged();
});
$("#select-none").addEventListener("click", () => {
  selected.clear();
  selectionChanged();
});
for (const th of document.querySelectorAll("th.sortable")) {
  th.addEventListener("click", () => {
    view.dir = view.sort === th.dataset.key ? -view.dir : 1;
    view.sort = th.dataset.key;
    show();
  });
}
$("#filter").addEventListener("input", show);
refresh();
setInterval(refresh, 5000);
