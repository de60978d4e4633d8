// The runs list: one row per run from /api/v1/runs, refreshed every 5 s.
const body = document.querySelector("#runs tbody");
const message = document.querySelector("#message");
const selected = new Set();
document.querySelector("#compare").addEventListener("click", () => {
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

async function refresh() {
  try {
    const response = await fetch("/api/v1/runs");
    if (!response.ok) throw new Error((await response.json()).error);
    const { runs } = await response.json();
    body.replaceChildren(...runs.map((r) => {
      const tr = document.createElement("tr");
      const name = document.createElement("td");
      const link = document.createElement("a");
      link.href = `/static/run.html?run=${encodeURIComponent(r.name)}`;
      link.textContent = r.name;
      name.append(link);
      const pick = document.createElement("td");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = r.name;
      box.checked = selected.has(r.name);
      box.addEventListener("change", () => (box.checked ? selected.add(r.name) : selected.delete(r.name)));
      pick.append(box);
      tr.append(pick, name, cell(r.status, `status ${r.status}`), cell(r.precision || "-"), cell(r.steps),
                cell(fmt(r.last_loss, 4)), cell(r.tokens === null ? "-" : Number(r.tokens).toExponential(2)),
                cell(r.uptime === null ? "-" : `${(100 * r.uptime).toFixed(1)}%`),
                cell(r.alerts, r.alerts > 0 ? "alerts" : ""));
      return tr;
    }));
    message.textContent = runs.length ? "" : "No runs yet.";
  } catch (e) {
    message.textContent = `Cannot read the runs: ${e.message}`;
  }
}

refresh();
setInterval(refresh, 5000);
