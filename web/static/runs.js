// The runs list: one row per run from /api/v1/runs, refreshed every 5 s;
// filtered by name, status, precision or tag, sorted by any column, with
// each run's tags and note (edited with the server's token), and a banner
// while the store cannot be written.
import { showStoreHealth } from "./store_health.js";

const $ = (sel) => document.querySelector(sel);
const body = $("#runs tbody");
const message = $("#message");
const selected = new Set();
const view = { sort: "started_at", dir: -1, runs: [] };

$("#compare").addEventListener("click", () => {
  if (selected.size < 2) {
    message.textContent = "Select two or more runs to compare.";
    return;
  }
  location.href = `/static/compare.html?runs=${[...selected].map(encodeURIComponent).join(",")}`;
});

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

async function annotate(r) {
  const tags = prompt(`Tags of "${r.name}" (comma-separated):`, (r.tags || []).join(", "));
  if (tags === null) return;
  const note = prompt(`Note on "${r.name}":`, r.note || "");
  if (note === null) return;
  const token = prompt("Access token (printed by `hlat serve` at start):");
  if (token === null) return;
  const response = await fetch(`/api/v1/runs/${encodeURIComponent(r.name)}/annotate`, {
    method: "POST", headers: { "X-HLAT-Token": token },
    body: JSON.stringify({ tags: tags.split(",").map((t) => t.trim()).filter(Boolean), note }),
  });
  message.textContent = response.ok ? "" : `Not saved: ${(await response.json()).error}`;
  refresh();
}

function row(r) {
  const tr = document.createElement("tr");
  const name = document.createElement("td");
  const link = Object.assign(document.createElement("a"), { href: `/static/run.html?run=${encodeURIComponent(r.name)}`,
                                                             textContent: r.name });
  name.append(link, " ", ...(r.tags || []).map((t) => Object.assign(document.createElement("span"), { className: "tag", textContent: t })));
  const pick = document.createElement("td");
  const box = Object.assign(document.createElement("input"), { type: "checkbox", value: r.name, checked: selected.has(r.name) });
  box.addEventListener("change", () => (box.checked ? selected.add(r.name) : selected.delete(r.name)));
  pick.append(box);
  const note = cell(r.note || "", "note");
  const edit = Object.assign(document.createElement("button"), { type: "button", textContent: "✎", title: "edit tags and note" });
  edit.addEventListener("click", () => annotate(r).catch((e) => (message.textContent = e.message)));
  note.prepend(edit, " ");
  tr.append(pick, name, cell(r.status, `status ${r.status}`), cell(r.precision || "-"), cell(r.steps),
            cell(fmt(r.last_loss, 4)), cell(r.tokens === null ? "-" : Number(r.tokens).toExponential(2)),
            cell(r.uptime === null ? "-" : `${(100 * r.uptime).toFixed(1)}%`),
            cell(r.alerts, r.alerts > 0 ? "alerts" : ""), note);
  return tr;
}

function show() {
  const filter = $("#filter").value;
  const key = view.sort;
  const runs = view.runs.filter((r) => matches(r, filter)).sort((a, b) => {
    const x = a[key] ?? -Infinity, y = b[key] ?? -Infinity;
    return (x < y ? -1 : x > y ? 1 : 0) * view.dir;
  });
  body.replaceChildren(...runs.map(row));
  for (const th of document.querySelectorAll("th.sortable")) {
    th.classList.toggle("asc", th.dataset.key === key && view.dir > 0);
    th.classList.toggle("desc", th.dataset.key === key && view.dir < 0);
  }
  message.textContent = view.runs.length ? (runs.length ? "" : "No run matches the filter.") : "No runs yet.";
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
