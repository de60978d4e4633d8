// The runs list: one row per run from /api/v1/runs, refreshed every 5 s.
const body = document.querySelector("#runs tbody");
const message = document.querySelector("#message");

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
      tr.append(cell(r.name), cell(r.status, `status ${r.status}`), cell(r.precision || "-"), cell(r.steps),
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
