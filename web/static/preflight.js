// A pre-flight run's page: one row per rank (its GEMM rates, memory
// bandwidth, exact-arithmetic check and model checksum, with the fleet
// median beside them), the collectives as nccl-tests reports them, and the
// verdict. A failing rank's row is red, and so is the number that failed it.

const fmt = (x, digits = 1) => x.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

function cell(row, text, bad = false) {
  const td = row.insertCell();
  td.textContent = text;
  if (bad) td.className = "bad";
}

function table(headings) {
  const t = document.createElement("table");
  const head = t.createTHead().insertRow();
  for (const h of headings) head.append(Object.assign(document.createElement("th"), { textContent: h }));
  return t;
}

// [key, heading, the report's field holding its minimum fraction of the median]
const RATES = [
  ["fp32_gemm_gflops", "fp32 GEMM GFLOP/s", "min_fraction"],
  ["bf16_gemm_gflops", "bf16 GEMM GFLOP/s", "min_fraction"],
  ["triad_gbs", "memory GB/s (triad)", "min_memory_fraction"],
];

function rankTable(report) {
  const medians = Object.fromEntries(RATES.map(([k]) => [k, median(report.ranks.map((r) => r[k]))]));
  const t = table(["rank", "host", ...RATES.map(([, h]) => h), "wrong GEMM elements", "model checksum"]);
  const sums = report.ranks.map((r) => r.model_checksum);
  const common = sums.sort((a, b) => sums.filter((s) => s === b).length - sums.filter((s) => s === a).length)[0];
  for (const r of report.ranks) {
    const row = t.insertRow();
    const failed = report.failures.some((f) => f.startsWith(`rank ${r.rank} (`));
    if (failed) row.className = "failed";
    cell(row, r.rank);
    cell(row, r.host);
    for (const [k, , limit] of RATES)
      cell(row, `${fmt(r[k])} (${Math.round(100 * r[k] / medians[k])}%)`, r[k] < report[limit] * medians[k]);
    cell(row, r.wrong_gemm_elements, r.wrong_gemm_elements > 0);
    cell(row, r.model_checksum, failed && r.model_checksum !== common);
  }
  return t;
}

function collectiveTable(report) {
  const t = table(["operation", "bytes", "time µs", "algbw GB/s", "busbw GB/s"]);
  for (const c of report.collectives) {
    const row = t.insertRow();
    for (const text of [c.op, c.bytes.toLocaleString("en-US"), fmt(c.time_us), fmt(c.algbw_gbs, 3), fmt(c.busbw_gbs, 3)])
      cell(row, text);
  }
  return t;
}

export function showPreflight(report, section) {
  section.hidden = false;
  section.replaceChildren();
  const verdict = document.createElement("p");
  verdict.className = report.passed ? "verdict passed" : "verdict failed";
  verdict.textContent = report.passed
    ? "Pre-flight passed: every rank's rates near the fleet median, its arithmetic exact."
    : "Pre-flight FAILED:";
  section.append(Object.assign(document.createElement("h2"), { textContent: "Pre-flight, per rank" }), verdict);
  if (!report.passed) {
    const list = document.createElement("ul");
    for (const f of report.failures) list.append(Object.assign(document.createElement("li"), { textContent: f }));
    section.append(list);
  }
  section.append(rankTable(report));
  const note = `Each rate is shown with its share of the fleet median; a rank below ${Math.round(100 * report.min_fraction)}% ` +
    `of a GEMM rate or ${Math.round(100 * report.min_memory_fraction)}% of the memory bandwidth fails, and so does one ` +
    "whose GEMMs of exact integers or model checksum are wrong.";
  section.append(Object.assign(document.createElement("p"), { className: "hint", textContent: note }));
  if (report.collectives.length) {
    section.append(Object.assign(document.createElement("h2"), { textContent: "Collectives (as nccl-tests)" }),
      Object.assign(document.createElement("p"), { className: "hint",
        textContent: "algbw = bytes / time; busbw = algbw × 2(n−1)/n for all_reduce, × (n−1)/n for all_gather and reduce_scatter: " +
          "comparable with a link's bandwidth whatever the rank count." }),
      collectiveTable(report));
  }
}
